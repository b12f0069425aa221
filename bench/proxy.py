#!/usr/bin/env python3
"""A loopback TCP proxy that counts the bytes of every connection, for the bytes-per-op figure of bench/run.sh.

    proxy.py LISTEN_PORT TARGET_PORT LOG_FILE

Listens on 127.0.0.1:LISTEN_PORT and forwards each connection to 127.0.0.1:TARGET_PORT (a `git daemon`). Appends
to LOG_FILE one line when a connection opens and one when both directions have closed:

    open <n>
    close <n> <bytes client->server> <bytes server->client>

so a reader knows every connection is accounted for once the open and close lines pair up.
"""

import socket
import sys
import threading

listen_port, target_port, log_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
log_lock = threading.Lock()


def log(line):
    with log_lock, open(log_path, "a") as f:
        f.write(line + "\n")


def pump(src, dst, counts, i):
    """Copy src to dst until EOF, counting bytes in counts[i]; then pass the EOF on (half-close)."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            counts[i] += len(data)
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def serve(n, client):
    counts = [0, 0]
    try:
        upstream = socket.create_connection(("127.0.0.1", target_port))
    except OSError:
        client.close()
        log(f"close {n} 0 0")
        return
    up = threading.Thread(target=pump, args=(client, upstream, counts, 0))
    up.start()
    pump(upstream, client, counts, 1)
    up.join()
    client.close()
    upstream.close()
    log(f"close {n} {counts[0]} {counts[1]}")


def main():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", listen_port))
    srv.listen(64)
    n = 0
    while True:
        client, _ = srv.accept()
        n += 1
        log(f"open {n}")
        threading.Thread(target=serve, args=(n, client), daemon=True).start()


if __name__ == "__main__":
    main()
