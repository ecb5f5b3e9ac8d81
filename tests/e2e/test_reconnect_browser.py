"""A page whose live socket drops says it is reconnecting, reconnects by itself, and catches up on what
happened meanwhile, without a reload.

The page is served through a TCP proxy on loopback in front of the live stack; cutting the proxy is the
network (or a web process) going away: every open connection is dropped and new ones are refused
until it is resumed.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect

from agents.models import Question
from negotiations import demo
from tests.conftest import LiveStack, wait_until
from tests.e2e.conftest import WAIT, not_reloaded, off_loop
from tests.e2e.test_browser import QUESTION, log_in_as_tomas, start_demo_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]


class CuttableProxy:
    """Forwards TCP connections on ``origin`` to 127.0.0.1:``upstream``; :meth:`cut` drops them all and
    refuses new ones until :meth:`resume`."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.origin = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.up = True
        self.lock = threading.Lock()
        self.open: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            with self.lock:
                if not self.up:
                    client.close()
                    continue
                server = socket.create_connection(("127.0.0.1", self.upstream))
                self.open |= {client, server}
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                target.sendall(data)
        self._drop(source, target)

    def _drop(self, *sockets: socket.socket) -> None:
        with self.lock:
            for s in sockets:
                self.open.discard(s)
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def cut(self) -> None:
        with self.lock:
            self.up = False
            dropping = list(self.open)
        self._drop(*dropping)

    def resume(self) -> None:
        with self.lock:
            self.up = True

    def close(self) -> None:
        self.cut()
        self.listener.close()


@pytest.fixture
def proxy(live_stack: LiveStack) -> Iterator[CuttableProxy]:
    proxied = CuttableProxy(int(live_stack.url.rsplit(":", 1)[1]))
    yield proxied
    proxied.close()


def test_a_dropped_socket_shows_reconnecting_and_the_page_catches_up_on_return(
    live_stack: LiveStack, proxy: CuttableProxy, browser: Browser
) -> None:
    page = browser.new_page()
    page.set_default_timeout(WAIT)
    world = off_loop(demo.demo_seed)
    log_in_as_tomas(page, proxy.origin)
    banner = page.get_by_role("status").filter(has_text="Reconnecting…")
    expect(banner).to_be_hidden()

    proxy.cut()
    expect(banner).to_be_visible()
    expect(page.locator("body")).to_have_attribute("data-live", "disconnected")

    # The question is asked while the page cannot hear of it.
    off_loop(lambda: start_demo_run(world))
    wait_until(
        lambda: off_loop(Question.across_tenants.filter(run__agent=world.tomas_agent).exists),
        what="the question",
    )
    expect(page.get_by_text(QUESTION)).to_be_hidden()

    proxy.resume()
    expect(page.locator("body")).to_have_attribute("data-live", "connected")
    expect(banner).to_be_hidden()
    expect(page.get_by_text(QUESTION)).to_be_visible()
    expect(page.get_by_role("heading", name="Questions from your agents (1)")).to_be_visible()
    assert not_reloaded(page)
