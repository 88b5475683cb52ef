"""A TCP forwarder that a test can partition: the network between one process and a server, cut on
demand without touching the server. Cut, it turns into a black hole, as a real partition is: open
connections stay open and new ones are accepted, but nothing gets through either way (no reset, so the
client learns of it only by its own timeouts)."""

from __future__ import annotations

import socket
import threading


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``target`` until :meth:`cut`."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.partitioned = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._sockets.append(client)
                if self.partitioned:            # accepted, never answered
                    threading.Thread(target=self._pump, args=(client, None), daemon=True).start()
                    continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets.append(upstream)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket | None) -> None:
        try:
            while data := source.recv(65536):
                if sink is not None and not self.partitioned:
                    sink.sendall(data)
        except OSError:
            pass

    def cut(self) -> None:
        """Partition: from now on nothing is forwarded either way."""
        self.partitioned = True

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
