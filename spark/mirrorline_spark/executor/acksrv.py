"""The executor's end of `mirrorline_spark.acks`: a Unix socket per flow on which the
sink's commit hands over each micro-batch's acknowledgements."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Callable
from typing import Any

from mirrorline_spark.acks import PartitionAcks, decode_length, encode

log = logging.getLogger(__name__)

#: Takes one micro-batch's acknowledgements; returns an error to fail the micro-batch.
OnBatch = Callable[[int, list[PartitionAcks]], str | None]


class AckServer:
    def __init__(self, path: str, on_batch: OnBatch) -> None:
        self.path = path
        self._on_batch = on_batch
        self._server: asyncio.Server | None = None

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

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reply: dict[str, Any]
        try:
            header = await reader.readexactly(4)
            doc = json.loads(await reader.readexactly(decode_length(header)))
            acks = [PartitionAcks.from_json(a) for a in doc.get("acks", [])]
            error = self._on_batch(int(doc.get("batch", -1)), acks)
            reply = {"ok": True} if error is None else {"error": error}
        except (asyncio.IncompleteReadError, ValueError, TypeError, KeyError) as exc:
            log.warning("malformed acknowledgement message: %r", exc)
            reply = {"error": f"malformed acknowledgement message: {exc!r}"}
        try:
            writer.write(encode(reply))
            await writer.drain()
        finally:
            writer.close()
