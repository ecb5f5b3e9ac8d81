"""A dashboard socket's reader for bench/live.py, in a process of its own.

``python bench/live_reader.py URL ORIGIN`` connects to the WebSocket at
``URL`` (with the cookie in ``BENCH_READER_COOKIE``, if any, and ``Origin:
ORIGIN``, as a browser sends them), prints ``connected``, then for each
``question.opened`` frame a line ``<question id> <arrival, epoch s>``, flushed
at once. It exits when the server closes the socket, or with status 1 when it
cannot connect. Arrivals are stamped here, not in the benchmark's process:
that process also serves the worker's model calls and polls the database, and
a frame stamped there would wait for its GIL.

Nothing here is imported by Parley.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time


async def read(url: str, origin: str) -> None:
    """Print each ``question.opened`` frame's question and arrival until the server closes."""
    import websockets

    headers = {"Origin": origin}
    if cookie := os.environ.get("BENCH_READER_COOKIE"):
        headers["Cookie"] = cookie
    async with websockets.connect(url, additional_headers=headers) as socket:
        print("connected", flush=True)
        try:
            async for frame in socket:
                received = time.time()
                message = json.loads(frame)
                if message["event"] == "question.opened":
                    print(message["payload"]["question"], received, flush=True)
        except websockets.ConnectionClosed:
            return  # the server stopped at the end of the benchmark


if __name__ == "__main__":
    try:
        asyncio.run(read(sys.argv[1], sys.argv[2]))
    except OSError:
        sys.exit(1)  # the server is not listening yet
