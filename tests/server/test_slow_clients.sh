#!/bin/bash
# Slow clients against gem serve (real server processes on loopback with
# the tiny model; python3 drives the raw sockets): sockets sending one
# header byte every half second, more than --max-conns allows,
# while /health and a completion must still answer promptly (they once
# got 503 for the whole read timeout: 128 such sockets held every connection);
# a head is due within --header-timeout, the whole request within
# --timeout.
NAME=test_slow_clients
. tests/server/lib.sh
command -v python3 >/dev/null 2>&1 || { bad "python3 is not installed"; finish; }
tiny_model

# ---- slow clients: 16 sockets for --max-conns 8, one header byte every 0.5 s ----
start slow --max-conns 8 || finish
python3 - "$PORT" 16 4 >"$tmp/slow" 2>&1 <<'EOF' &
import socket, sys, time, threading
port, n, secs = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
head = b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 200
seen = {}
lock = threading.Lock()
def one():
    end = time.time() + secs
    while time.time() < end: # reconnects when answered or closed
        try:
            s = socket.create_connection(("127.0.0.1", port))
            s.settimeout(0.5)
            for i in range(len(head)):
                if time.time() >= end: break
                s.sendall(head[i:i + 1])
                try:
                    d = s.recv(4096)
                    with lock:
                        k = d.split(b"\r\n")[0].decode(errors="replace") if d else "closed"
                        seen[k] = seen.get(k, 0) + 1
                    break
                except socket.timeout:
                    pass
            s.close()
        except OSError:
            time.sleep(0.1)
ts = [threading.Thread(target=one) for _ in range(n)]
for t in ts: t.start()
for t in ts: t.join()
for k, v in sorted(seen.items()): print(v, k)
EOF
slow=$!
sleep 2
for i in 1 2 3; do
    t0=$(date +%s%N)
    r=$(curl -s --max-time 5 -w ' %{http_code}' "http://127.0.0.1:$PORT/health")
    t1=$(date +%s%N)
    [ "$r" = '{"status":"ok"} 200' ] && [ $(((t1 - t0) / 1000000)) -lt 1000 ] && ok \
        || bad "/health $i with every connection held by slow clients: '$r' after $(((t1 - t0) / 1000000)) ms"
    t0=$(date +%s%N)
    r=$(curl -s --max-time 5 -w ' %{http_code}' "http://127.0.0.1:$PORT/v1/completions" -d '{"prompt":"Hi","max_tokens":2}')
    t1=$(date +%s%N)
    case "$r" in *'"completion_tokens":2'*' 200') [ $(((t1 - t0) / 1000000)) -lt 2000 ] && ok || bad "completion $i took $(((t1 - t0) / 1000000)) ms" ;;
        *) bad "completion $i with every connection held by slow clients: $r" ;; esac
    sleep 0.3
done
wait $slow
grep -q "evicted: receiving its request for" "$tmp/slow.log" && ok || bad "no slow client evicted: $(tail -5 "$tmp/slow.log")"
# the slow clients were told: 408 for an evicted one, 503 beyond --max-conns
grep -q "HTTP/1.1 408 Request Timeout" "$tmp/slow" && grep -q "HTTP/1.1 503 Service Unavailable" "$tmp/slow" && ok || bad "the slow clients' answers: $(cat "$tmp/slow")"
kill $PID

# ---- --header-timeout bounds the head, --timeout the whole request ----
start heads --header-timeout 1 --timeout 4 || finish
python3 - "$PORT" >"$tmp/heads" 2>&1 <<'EOF'
import socket, sys, time
port = int(sys.argv[1])
def ask(parts, gap):
    s = socket.create_connection(("127.0.0.1", port))
    t0 = time.time()
    try:
        for p in parts:
            s.sendall(p)
            time.sleep(gap)
    except OSError:
        pass # answered and closed before the last part
    s.settimeout(10)
    d = b""
    try:
        while True:
            k = s.recv(4096)
            if not k: break
            d += k
    except OSError:
        pass
    return "%.1f %s" % (time.time() - t0, d.split(b"\r\n")[0].decode(errors="replace"))
# a head one byte every 0.2 s: cut after 1 s whatever it sends
print("head", ask([bytes([b]) for b in b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaa"], 0.2))
# a whole head at once, then a body over 2 s: within --timeout, answered
b = b'{"content":"Hello world"}'
h = b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(b)
print("body", ask([h] + [b[i:i + 5] for i in range(0, len(b), 5)], 0.4))
# a connection that sends nothing: closed at the head deadline
s = socket.create_connection(("127.0.0.1", port))
t0 = time.time()
s.settimeout(10)
try:
    d = s.recv(10)
except OSError as e:
    d = str(e).encode()
print("silent %.1f %r" % (time.time() - t0, d))
EOF
read -r _ t line <<<"$(grep '^head' "$tmp/heads")"
[ "${line:0:12}" = "HTTP/1.1 408" ] && awk -v t="$t" 'BEGIN { exit !(t >= 0.9 && t < 2.5) }' && ok || bad "a slow head: $(cat "$tmp/heads")"
read -r _ t line <<<"$(grep '^body' "$tmp/heads")"
[ "${line:0:12}" = "HTTP/1.1 200" ] && ok || bad "a slow body within --timeout: $(cat "$tmp/heads")"
read -r _ t _ <<<"$(grep '^silent' "$tmp/heads")"
awk -v t="$t" 'BEGIN { exit !(t >= 0.9 && t < 2.5) }' && ok || bad "a silent connection: $(cat "$tmp/heads")"
grep -q "408: request head timeout" "$tmp/heads.log" && ok || bad "the head timeout not logged"
kill $PID

no_sanitizer_reports
finish
