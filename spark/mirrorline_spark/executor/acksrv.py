"""The executor's end of `mirrorline_spark.acks`: a Unix socket on which the sink's commit
hands over each micro-batch's acknowledgements.

The socket lives in the executor's private work directory (mode 0700), so other users
cannot connect. A process of the same user can, so a message counts only with the secret
of the query the executor started (`secret`, new for every query, compared in constant
time); anything else is refused with one WARNING line that never holds a secret, and
changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
from collections.abc import Callable
from typing import Any

from mirrorline_spark.acks import PartitionAcks, decode_length, encode

log = logging.getLogger(__name__)

#: Takes one micro-batch's acknowledgements; returns an error to fail the micro-batch.
OnBatch = Callable[[int, list[PartitionAcks]], str | None]

#: The reply to a message that is not from the running query.
REFUSED = "refused: not from the executor's running query"


class AckServer:
    def __init__(self, path: str, on_batch: OnBatch) -> None:
        self.path = path
        self._on_batch = on_batch
        self._server: asyncio.Server | None = None
        #: The running query's secret; None while no query runs (everything is refused).
        self.secret: str | None = None

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self._server = await asyncio.start_unix_server(self._serve, path=self.path)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def _from_query(self, doc: dict[str, Any]) -> bool:
        expected, presented = self.secret, doc.get("secret")
        return (expected is not None and isinstance(presented, str)
                and hmac.compare_digest(presented.encode(), expected.encode()))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reply: dict[str, Any]
        try:
            header = await reader.readexactly(4)
            doc = json.loads(await reader.readexactly(decode_length(header)))
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            if not self._from_query(doc):
                log.warning("refused an acknowledgement message: it does not carry the "
                            "secret of the running Spark query; nothing recorded")
                reply = {"error": REFUSED}
            else:
                acks = [PartitionAcks.from_json(a) for a in doc.get("acks", [])]
                error = self._on_batch(int(doc.get("batch", -1)), acks)
                reply = {"ok": True} if error is None else {"error": error}
        except (asyncio.IncompleteReadError, ValueError, TypeError, KeyError) as exc:
            log.warning("malformed acknowledgement message: %s", type(exc).__name__)
            reply = {"error": f"malformed acknowledgement message: {type(exc).__name__}"}
        try:
            writer.write(encode(reply))
            await writer.drain()
        finally:
            writer.close()
