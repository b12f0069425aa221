#!/usr/bin/env python3
"""A loopback TCP proxy that counts the bytes of every connection, for the bytes-per-op figure of bench/run.sh, and
can stand for a far remote (bench/internet.py): a delay per fetch and per push.

    proxy.py LISTEN_PORT TARGET_PORT LOG_FILE [--fetch-delay S] [--push-delay S]

Listens on 127.0.0.1:LISTEN_PORT and forwards each connection to 127.0.0.1:TARGET_PORT (a `git daemon`). Appends
to LOG_FILE one line when a connection opens and one when both directions have closed:

    open <n>
    close <n> <bytes client->server> <bytes server->client>

so a reader knows every connection is accounted for once the open and close lines pair up. The close line then
ends with the service the client asked for (`git-upload-pack`, `git-receive-pack`), read off the git:// request.

The delays: a connection for `git-upload-pack` (a fetch, an ls-remote) is held FETCH_DELAY before it reaches the
server. One for `git-receive-pack` (a push) is held FETCH_DELAY before the server sees it (the round trip to the
ref advertisement) and PUSH_DELAY − FETCH_DELAY more once the client sends its commands and pack, before the
server's compare-and-swap: as a push to a far forge spends most of its time between reading the refs and updating
them. A push that finds its lease stale at the advertisement costs only the first part.
"""

import argparse
import resource
import socket
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("listen_port", type=int)
ap.add_argument("target_port", type=int)
ap.add_argument("log_path")
ap.add_argument("--fetch-delay", type=float, default=0.0)
ap.add_argument("--push-delay", type=float, default=0.0)
args = ap.parse_args()
listen_port, target_port, log_path = args.listen_port, args.target_port, args.log_path
log_lock = threading.Lock()
# Two sockets a connection, hundreds of connections at once under a big fleet: as many files as the system allows.
resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)


def log(line):
    with log_lock, open(log_path, "a") as f:
        f.write(line + "\n")


def pump(src, dst, counts, i, hold=0.0):
    """Copy src to dst until EOF, counting bytes in counts[i]; then pass the EOF on (half-close). `hold`: seconds to
    wait before passing on the first bytes."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            counts[i] += len(data)
            if hold:
                time.sleep(hold)
                hold = 0.0
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def request(client):
    """The git:// request: its first pkt-line, whole (`git-upload-pack /repo.git\0host=…\0`)."""
    data = b""
    while len(data) < 4 or len(data) < int(data[:4] or b"0", 16):
        more = client.recv(65536)
        if not more:
            break
        data += more
        if len(data) >= 4 and not all(c in b"0123456789abcdef" for c in data[:4].lower()):
            break
    return data


def serve(n, client):
    counts = [0, 0]
    first = request(client)
    service = first[4:].split(b" ", 1)[0].decode("ascii", "replace") if len(first) > 4 else "?"
    counts[0] += len(first)
    push = service == "git-receive-pack"
    if args.fetch_delay:
        time.sleep(args.fetch_delay)
    try:
        upstream = socket.create_connection(("127.0.0.1", target_port))
        upstream.sendall(first)
    except OSError:
        client.close()
        log(f"close {n} 0 0 {service}")
        return
    hold = max(0.0, args.push_delay - args.fetch_delay) if push else 0.0
    up = threading.Thread(target=pump, args=(client, upstream, counts, 0, hold))
    up.start()
    pump(upstream, client, counts, 1)
    up.join()
    client.close()
    upstream.close()
    log(f"close {n} {counts[0]} {counts[1]} {service}")


def main():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", listen_port))
    srv.listen(1024)
    n = 0
    while True:
        client, _ = srv.accept()
        n += 1
        log(f"open {n}")
        threading.Thread(target=serve, args=(n, client), daemon=True).start()


if __name__ == "__main__":
    main()
