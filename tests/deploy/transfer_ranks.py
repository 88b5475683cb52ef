"""A timed TCP transfer between ranks of an emulated cluster (run by ``p2 cluster run``).

``python transfer_ranks.py SENDERS BYTES``: every rank listed in SENDERS (e.g.
``4`` or ``4,5,6,7``) sends BYTES to rank 0 over its own TCP connection, all at
once; rank 0 prints ``TRANSFER bytes=<total> seconds=<elapsed>``, measured
from the moment it tells the senders to start until every byte has arrived.
Other ranks exit at once. Plain sockets: no torch, quick to start.
"""

import os
import socket
import sys
import threading
import time

senders = [int(r) for r in sys.argv[1].split(",")]
size = int(sys.argv[2])
rank = int(os.environ["RANK"])
address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))

if rank == 0:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(address)
    server.listen(len(senders))
    connections = [server.accept()[0] for _ in senders]
    received = [0] * len(connections)

    def drain(index: int) -> None:
        buffer = bytearray(1 << 20)
        while True:
            n = connections[index].recv_into(buffer)
            if not n:
                break
            received[index] += n

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(len(connections))]
    start = time.perf_counter()
    for connection in connections:
        connection.sendall(b"g")
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    print(f"TRANSFER bytes={sum(received)} seconds={elapsed:.4f}")
elif rank in senders:
    deadline = time.monotonic() + 20
    while True:
        try:
            connection = socket.create_connection(address, timeout=20)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    connection.recv(1)
    chunk = memoryview(bytearray(1 << 20))
    left = size
    while left > 0:
        left -= connection.send(chunk[:min(left, len(chunk))])
    connection.close()
