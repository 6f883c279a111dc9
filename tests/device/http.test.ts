/**
 * Unmodified C HTTP clients from Debian talking to `node:http`'s server over RDMA: the server runs
 * in this test's runtime (`scripts/test` runs the file in Deno and in Bun), fed RDMA connections by
 * `net.serveHttp`; the client runs under `LD_PRELOAD=librspreload.so`, so its socket calls are
 * rsocket calls and its bytes go over the device as rsocket's protocol.
 *
 * - `curl`: a GET of 1,000,000 bytes sent chunked, then (`--next`) a POST of 1 MiB on the same
 *   kept-alive connection (`num_connects` 1 then 0; the server saw one connection), both verified;
 * - GNU `wget`: the same GET and POST (a connection each: wget closes after a response).
 *
 * Each skips with the reason when the tool or the preload library is missing. Why other clients
 * cannot run this way (busybox `wget` is static, Python's sockets are created with SOCK_CLOEXEC,
 * which rdma-core 44's rsocket refuses) is in net/README.md. About 10 s per runtime in the guest.
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { spawnSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type DeviceEnv, deviceTest } from "../harness.ts";
import { account, run } from "./examples-common.ts";
import { net } from "../lib.ts";

const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

/** rdma-core's rsocket preload library, where Debian and others install it. */
function preloadLibrary(): string | null {
  for (const dir of ["x86_64-linux-gnu", "aarch64-linux-gnu"]) {
    const p = `/usr/lib/${dir}/rsocket/librspreload.so`;
    if (existsSync(p)) return p;
  }
  for (const p of ["/usr/lib64/rsocket/librspreload.so", "/usr/lib/rsocket/librspreload.so"]) {
    if (existsSync(p)) return p;
  }
  return null;
}

/** Why `tool` cannot run here, or false. */
function missing(tool: string): string | false {
  if (!preloadLibrary()) return "librspreload.so (rdma-core's librdmacm1) is not installed";
  const r = spawnSync("sh", ["-c", `command -v ${tool}`], { encoding: "utf8" });
  return r.status === 0 ? false : `${tool} is not installed (Debian package ${tool})`;
}

/** The bytes of `/big/N`: a fixed pattern, so the client's file can be compared. */
function big(n: number): Buffer {
  const b = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) b[i] = (i * 13 + 7) & 0xff;
  return b;
}

/** An HTTP server of node:http on the device's address over RDMA, counting its connections. */
async function startServer(env: DeviceEnv) {
  const requests: string[] = [];
  const httpServer = http.createServer((req, res) => {
    const h = createHash("sha256");
    let n = 0;
    req.on("data", (c: Buffer) => {
      h.update(c);
      n += c.length;
    });
    req.on("end", () => {
      requests.push(`${req.method} ${req.url} ${n} ${req.headers["user-agent"]}`);
      if (req.url?.startsWith("/big/")) {
        const b = big(Number(req.url.slice(5)));
        res.setHeader("content-type", "application/octet-stream");
        res.write(b.subarray(0, b.length >> 1)); // no content-length: chunked
        res.end(b.subarray(b.length >> 1));
      } else res.end(`${req.method} ${req.url} ${n} ${h.digest("hex")}\n`);
    });
  });
  const server = net.serveHttp(httpServer);
  let connections = 0;
  server.on("connection", () => connections++);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, env.address, resolve);
  });
  const port = server.address()!.port;
  return {
    url: `http://${env.address}:${port}`,
    requests,
    connections: () => connections,
    close: async () => {
      httpServer.closeAllConnections?.();
      await new Promise((r) => server.close(r));
    },
  };
}

/** Runs `fn` with a scratch directory holding a random 1 MiB request body. */
function withFiles<T>(fn: (dir: string, body: Buffer, bodyPath: string) => Promise<T>) {
  const dir = mkdtempSync(join(tmpdir(), "rs-http-"));
  const post = randomBytes(1 << 20);
  const bodyPath = join(dir, "post.bin");
  writeFileSync(bodyPath, post);
  return fn(dir, post, bodyPath).finally(() => rmSync(dir, { recursive: true, force: true }));
}

const SIZE = 1_000_000;

deviceTest(
  "http: curl under LD_PRELOAD=librspreload.so — GET (chunked) and POST of 1 MiB on one kept-alive connection",
  async (env) => {
    const server = await startServer(env);
    try {
      await withFiles(async (dir, post, bodyPath) => {
        const got = join(dir, "got.bin");
        const answer = join(dir, "answer.txt");
        const w = "%{http_code} %{size_download} %{num_connects}\\n";
        const r = await run([
          "curl",
          "-sS",
          "--max-time",
          "60",
          "-o",
          got,
          "-w",
          w,
          `${server.url}/big/${SIZE}`,
          "--next",
          "--data-binary",
          `@${bodyPath}`,
          "-H",
          "content-type: application/octet-stream",
          "-o",
          answer,
          "-w",
          w,
          `${server.url}/post`,
        ], { env: { LD_PRELOAD: preloadLibrary()! }, timeoutMs: 90_000 });
        assert.equal(r.code, 0, account("curl", r));
        const lines = r.stdout.trim().split("\n");
        assert.deepEqual(
          lines,
          [`200 ${SIZE} 1`, `200 ${readFileSync(answer).length} 0`],
          account("curl", r),
        );
        assert.equal(sha(readFileSync(got)), sha(big(SIZE)), "the GET's body");
        assert.equal(readFileSync(answer, "utf8"), `POST /post ${post.length} ${sha(post)}\n`);
        assert.equal(server.connections(), 1, "both requests on one RDMA connection");
        assert.match(server.requests[0], /^GET \/big\/1000000 0 curl\//);
        console.log(`curl over rsocket: ${server.requests.join("; ")}`);
      });
    } finally {
      await server.close();
    }
  },
  { needs: () => missing("curl"), timeout: 180_000 },
);

deviceTest(
  "http: GNU wget under LD_PRELOAD=librspreload.so — GET (chunked) and POST of 1 MiB",
  async (env) => {
    const server = await startServer(env);
    try {
      await withFiles(async (dir, post, bodyPath) => {
        const preload = { LD_PRELOAD: preloadLibrary()! };
        const got = join(dir, "got.bin");
        const answer = join(dir, "answer.txt");
        const g = await run(["wget", "-q", "-T", "60", "-O", got, `${server.url}/big/${SIZE}`], {
          env: preload,
          timeoutMs: 90_000,
        });
        assert.equal(g.code, 0, account("wget GET", g));
        assert.equal(sha(readFileSync(got)), sha(big(SIZE)), "the GET's body");
        const p = await run([
          "wget",
          "-q",
          "-T",
          "60",
          "-O",
          answer,
          `--post-file=${bodyPath}`,
          `${server.url}/post`,
        ], { env: preload, timeoutMs: 90_000 });
        assert.equal(p.code, 0, account("wget POST", p));
        assert.equal(readFileSync(answer, "utf8"), `POST /post ${post.length} ${sha(post)}\n`);
        assert.equal(server.connections(), 2);
        assert.match(server.requests[0], /^GET \/big\/1000000 0 Wget\//);
        console.log(`wget over rsocket: ${server.requests.join("; ")}`);
      });
    } finally {
      await server.close();
    }
  },
  { needs: () => missing("wget"), timeout: 180_000 },
);
