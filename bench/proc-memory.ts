/**
 * This process's resident memory as Linux reports it, for the memory benches (soak, rss-steps,
 * open-conns). It loads no `node:` module (bench/process-native.ts), so a process that measures
 * itself with it carries only what it measures.
 *
 * @module
 */

import { self } from "./process-native.ts";

/**
 * KiB resident by mapping, from /proc/self/smaps: by file name only (which library or binary,
 * not where it is installed), `[heap]`, `[stack]`, or `[anon]` for anonymous mappings.
 */
export function residentByMapping(): Map<string, number> {
  const by = new Map<string, number>();
  let name = "";
  for (const line of self.readText("/proc/self/smaps").split("\n")) {
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
  const m = /^Anonymous:\s+(\d+) kB/m.exec(self.readText("/proc/self/smaps_rollup"));
  return m ? Number(m[1]) * 1024 : 0;
}
