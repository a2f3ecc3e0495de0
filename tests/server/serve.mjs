// Starts `gem serve` on a free loopback port for the Node test suites
// (openai/, anthropic/, schema/): resolves once the model is loaded and
// the port is known, rejects when the server exits or does not start in
// 20 s; serverPool keeps a suite's servers to stop them together. No
// dependencies, so each suite's package imports it by path.
import { spawn } from "node:child_process";

export function startServer(gem, model, args = []) {
  return new Promise((resolve, reject) => {
    const p = spawn(gem, ["serve", "-m", model, "--port", "0", ...args], { stdio: ["ignore", "ignore", "pipe"] });
    let log = "";
    const timer = setTimeout(() => reject(new Error("server did not start: " + log)), 20000);
    p.stderr.on("data", (d) => {
      log += d;
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m && log.includes("loaded in")) {
        clearTimeout(timer);
        resolve({ proc: p, port: Number(m[1]), log: () => log });
      }
    });
    p.on("exit", (code) => reject(new Error(`server exited ${code}: ${log}`)));
  });
}

// The servers of one suite, stopped together at its end (those still
// running get `signal`).
export function serverPool(gem, model) {
  const procs = [];
  return {
    async start(args) {
      const srv = await startServer(gem, model, args);
      procs.push(srv.proc);
      return srv;
    },
    stopAll(signal = "SIGTERM") {
      for (const p of procs) if (p.exitCode === null) p.kill(signal);
    },
  };
}
