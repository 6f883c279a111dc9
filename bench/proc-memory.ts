/**
 * This process's resident memory as Linux reports it, for the memory benches (soak, rss-steps,
 * open-conns). It loads no `node:` module (in Deno the first one sets up Node's compatibility
 * layer, several MiB of memory a measured RDMA process would not otherwise hold), so a process
 * that measures itself with it carries only what it measures.
 *
 * @module
 */

const isBun = "Bun" in globalThis;

/** The text of a file under /proc, read with the runtime's own call. */
function readProc(path: string): string {
  if (!isBun) return Deno.readTextFileSync(path);
  // Bun's fs is native: requiring it costs Bun about nothing
  const fs = (import.meta as unknown as { require(m: string): typeof import("node:fs") })
    .require("fs");
  return fs.readFileSync(path, "utf8");
}

/**
 * KiB resident by mapping, from /proc/self/smaps: by file name only (which library or binary,
 * not where it is installed), `[heap]`, `[stack]`, or `[anon]` for anonymous mappings.
 */
export function residentByMapping(): Map<string, number> {
  const by = new Map<string, number>();
  let name = "";
  for (const line of readProc("/proc/self/smaps").split("\n")) {
    const head = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head) {
      name = head[1] ? head[1].slice(head[1].lastIndexOf("/") + 1) : "[anon]";
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss) by.set(name, (by.get(name) ?? 0) + Number(rss[1]));
  }
  return by;
}

/** The process's anonymous resident memory (bytes), from /proc/self/smaps_rollup. */
export function anonymousBytes(): number {
  const m = /^Anonymous:\s+(\d+) kB/m.exec(readProc("/proc/self/smaps_rollup"));
  return m ? Number(m[1]) * 1024 : 0;
}
