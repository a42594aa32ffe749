"""Pure logic: no I/O, no asyncio. Every module here is tested directly."""
