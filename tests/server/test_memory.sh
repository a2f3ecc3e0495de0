#!/bin/bash
# gem serve's memory under abuse, against real server processes on
# loopback with the tiny model (python3 drives the raw sockets): 8
# concurrent 8 MiB bodies of 4 million prompt ids (the default
# --max-body) must not grow the server's peak RSS (VmHWM) past a stated
# bound. Each once became ~400 MB of JSON nodes (3.2 GB at peak for 8, in
# 67 s); now token id lists are packed, a prompt longer than the context
# is refused before it is copied, and the in-flight budget
# (--max-inflight) refuses what it cannot hold with a 503 before reading
# it. tests/run.sh runs it on the plain build only: ASan's allocator
# quarantines freed memory, so RSS there measures ASan as much as gem.
NAME=test_memory
. tests/server/lib.sh
command -v python3 >/dev/null 2>&1 || { bad "python3 is not installed"; finish; }
tiny_model

# bodies PORT N PATH KIND: N concurrent requests at once, KIND ids (4
# million prompt ids, 8 MiB) or hold (a head announcing 8 MiB and half of
# the body, left open for 1.5 s); prints each answer's status line and body
bodies() {
    python3 - "$@" <<'EOF'
import socket, sys, threading, time
port, n, path, kind = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
key = b"prompt" if path == "/v1/completions" else b"tokens"
body = b'{"' + key + b'":[' + b"1," * (4 * 1024 * 1024 - 7) + b'1]}' # 8 MiB
head = b"POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % (path.encode(), len(body))
out = [""] * n
def one(i):
    s = socket.create_connection(("127.0.0.1", port))
    try:
        if kind == "hold":
            s.sendall(head + body[: len(body) // 2])
            time.sleep(1.5)
            return
        s.sendall(head + body)
        s.settimeout(30)
        d = b""
        while True:
            k = s.recv(65536)
            if not k: break
            d += k
        out[i] = d.split(b"\r\n")[0].decode() + " " + d.split(b"\r\n\r\n", 1)[-1].decode(errors="replace")
    except OSError as e:
        out[i] = "error " + str(e)
    finally:
        s.close()
ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
for t in ts: t.start()
for t in ts: t.join()
for o in out:
    if o: print(o)
EOF
}
hwm_kb() { awk '/^VmHWM/ {print $2}' "/proc/$1/status"; }

# ---- memory: the default budget (4 x --max-body = 32 MiB) ----
start mem || finish
before=$(hwm_kb $PID)
bodies "$PORT" 8 /v1/completions ids >"$tmp/mem"
after=$(hwm_kb $PID)
grow=$(((after - before) / 1024))
# 4 bodies admitted at once, each 8 MiB received into exactly its size and
# 16 MiB of packed ids: about 100 MiB (measured 94)
[ "$grow" -lt 160 ] && ok || bad "8 bodies of 4M prompt ids grew the server's peak RSS by $grow MiB (bound 160 MiB)"
n400=$(grep -c "^HTTP/1.1 400 .*the prompt has 4194298 tokens; the context holds 4096" "$tmp/mem")
n503=$(grep -c "^HTTP/1.1 503 .*would pass --max-inflight 33554432; retry later" "$tmp/mem")
[ "$n400" -ge 1 ] && [ $((n400 + n503)) = 8 ] && ok || bad "answers to 8 bodies of ids: $(cut -c1-200 "$tmp/mem")"
[ "$(curl -s "http://127.0.0.1:$PORT/health")" = '{"status":"ok"}' ] && ok || bad "health after the bodies"
kill $PID
# without the budget each request is still bounded: 8 at once stay near 8 x 24 MiB (measured 184)
start membig --max-inflight 1073741824 || finish
before=$(hwm_kb $PID)
bodies "$PORT" 8 /v1/completions ids >"$tmp/mem"
bodies "$PORT" 2 /detokenize ids >"$tmp/detok"
after=$(hwm_kb $PID)
grow=$(((after - before) / 1024))
[ "$grow" -lt 300 ] && ok || bad "8 bodies of ids, no budget, grew the server by $grow MiB (bound 300 MiB)"
[ "$(grep -c "^HTTP/1.1 400 .*the context holds 4096" "$tmp/mem")" = 8 ] && ok || bad "no budget: $(cut -c1-200 "$tmp/mem")"
[ "$(grep -c "^HTTP/1.1 400 .*'tokens' has 4194298 ids; at most 4096 (the context) are detokenized" "$tmp/detok")" = 2 ] &&
    ok || bad "detokenize: $(cut -c1-200 "$tmp/detok")"
kill $PID
# the budget's 503, deterministically: a body still arriving holds its
# charge, so a second large one cannot pass; small requests always do
start budget --max-inflight 12582912 || finish
bodies "$PORT" 1 /v1/completions hold &
holder=$!
sleep 0.5
r=$(bodies "$PORT" 1 /v1/completions ids)
case "$r" in "HTTP/1.1 503 "*"the server holds 8388608 bytes of request bodies; this one's 8388608 would pass --max-inflight 12582912; retry later"*) ok ;;
    *) bad "a body over the budget: ${r:0:300}" ;; esac
r=$(curl -s -w ' %{http_code}' "http://127.0.0.1:$PORT/v1/completions" -d '{"prompt":"Hi","max_tokens":2}')
case "$r" in *'"completion_tokens":2'*' 200') ok ;; *) bad "a small request while the budget is taken: $r" ;; esac
grep -q "503: a body of 8388608 bytes would pass --max-inflight (8388608 bytes held)" "$tmp/budget.log" && ok || bad "the budget's 503 not logged"
wait $holder
sleep 0.5 # the holder's connection ends (408 after --timeout would be later: its close frees the charge)
r=$(bodies "$PORT" 1 /v1/completions ids)
case "$r" in "HTTP/1.1 400 "*) ok ;; *) bad "the budget after the holder left: ${r:0:300}" ;; esac
kill $PID
$GEM serve -m "$M" --port 0 --max-body 2000000 --max-inflight 1000000 >"$tmp/o" 2>&1
[ $? = 2 ] && grep -q "max-inflight 1000000 is below --max-body 2000000" "$tmp/o" && ok || bad "--max-inflight below --max-body: $(cat "$tmp/o")"

no_sanitizer_reports
finish
