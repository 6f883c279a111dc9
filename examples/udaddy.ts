/**
 * udaddy - `udaddy` over this library: unreliable datagrams set up through rdma_cm.
 * The client resolves the server's address and route on a UDP (or IPoIB) port-space
 * id and "connects" (an SIDR request); the server accepts with its UD QP number, and
 * the client learns the server's QPN, Q_Key and address handle from the ESTABLISHED
 * event. The client then sends `-C` datagrams (SEND with immediate = its QPN), the
 * server answers each through an address handle made from the first receive, and both
 * count their completions. Either side can be the C `udaddy`.
 *
 * ```sh
 * deno run --allow-ffi jsr:@rdma/verbs/examples/udaddy            # server
 * bun examples/udaddy.ts -s 10.0.2.15 -C 10 -S 100                # client
 * ```
 *
 * @module
 */

import {
  AccessFlags,
  type AddressHandle,
  type AddrInfoHints,
  awaitCompletions,
  type CmEvent,
  CmEventChannel,
  CmEventError,
  type CmId,
  type CompletionChannel,
  type CompletionQueue,
  Errno,
  type MemoryRegion,
  NativeError,
  type ProtectionDomain,
  QpType,
  type QueuePair,
  SendFlags,
  WcStatus,
  WrOpcode,
} from "../cm.ts";
import { out, runTool, stringOption, type ToolSpec, type Values } from "./_common/cli.ts";
import {
  bindAndListen,
  cmCounts,
  cmOptions,
  cmTest,
  eventStatus,
  formatHints,
  GAI_FAILURE,
  getRdmaAddr,
  perror,
  type RdmaAddr,
  Status,
  udPortSpace,
} from "./_common/cm.ts";

/** Bytes of a UD receive that hold the global route header. */
const GRH = 40;
const PORT = 7174;

const SPEC: ToolSpec = {
  name: "udaddy",
  synopsis: [
    "[-b bind_address] [-c connections] [-C message_count] [-S message_size]   (server)",
    "-s server_address [-b bind_address] [-c connections] [-C message_count] [-S message_size] [-t tos]",
  ],
  options: {
    ...cmOptions("server", "bind", "format"),
    "port-space-name": { short: "P", type: "string", arg: "port_space", help: "udp or ipoib" },
    ...cmOptions("connections", "count", "size", "tos", "ud-port-space"),
  },
  maxPositionals: 0,
  permissions: "--allow-ffi (libibverbs, librdmacm)",
  notes: ["rdma_cm port 7174, as the C tool."],
};

interface Settings {
  dst?: string;
  src?: string;
  portSpace: "UDP" | "IPOIB";
  /** `-f`: how addresses are resolved (`gid`: AF_IB). */
  hints: AddrInfoHints;
  connections: number;
  count: number;
  size: number;
  tos?: number;
}

/** One connection: the id and its verbs objects, the peer's UD address once known. */
class Node {
  readonly id: CmId;
  readonly pd: ProtectionDomain;
  readonly channel: CompletionChannel;
  readonly cq: CompletionQueue;
  readonly qp: QueuePair;
  readonly mr: MemoryRegion;
  ah: AddressHandle | null = null;
  remoteQpn = 0;
  remoteQkey = 0;
  connected = false;

  constructor(id: CmId, s: Settings) {
    const ctx = id.context;
    this.id = id;
    this.pd = ctx.allocPd();
    this.channel = ctx.createCompChannel();
    this.cq = ctx.createCq({ cqe: s.count ? s.count * 2 : 2, channel: this.channel });
    const depth = s.count ? s.count : 1;
    this.qp = id.createQp(this.pd, {
      sendCq: this.cq,
      recvCq: this.cq,
      type: QpType.UD,
      cap: { maxSendWr: depth, maxRecvWr: depth, maxSendSge: 1, maxRecvSge: 1 },
    });
    // one buffer, as the C tool: sends go from its start, receives land there (GRH first)
    this.mr = this.pd.allocBuffer(s.size + GRH, { access: AccessFlags.LOCAL_WRITE });
  }

  postRecvs(s: Settings): void {
    for (let i = 0; i < s.count; i++) {
      this.qp.postRecv({ wrId: i, sg: [{ mr: this.mr, offset: 0, length: s.size + GRH }] });
    }
  }

  /** Posts `-C` SEND_WITH_IMM datagrams (immediate: our QPN) to the peer. */
  postSends(s: Settings, signaled: boolean): void {
    if (!this.connected || !s.count || !this.ah) return;
    for (let i = 0; i < s.count; i++) {
      this.qp.postSend({
        wrId: i,
        opcode: WrOpcode.SEND_WITH_IMM,
        flags: signaled ? SendFlags.SIGNALED : 0,
        imm: this.qp.qpNum,
        sg: [{ mr: this.mr, offset: 0, length: s.size }],
        ud: { ah: this.ah, remoteQpn: this.remoteQpn, remoteQkey: this.remoteQkey },
      });
    }
  }

  /** Waits for `count` completions; the server makes its reply AH from the first receive. */
  async poll(count: number, replyAh: boolean): Promise<void> {
    for (let done = 0; done < count;) {
      const n = await awaitCompletions(this.cq, { max: 8 });
      for (let i = 0; i < n; i++) {
        const wc = this.cq.completion(i);
        if (wc.status !== WcStatus.SUCCESS) {
          throw new Error(`completion with status ${wc.statusName} (${wc.status})`);
        }
      }
      if (n > 0 && replyAh && !this.ah) {
        const wc = this.cq.completion(0);
        this.ah = this.pd.createAhFromWc(wc, { mr: this.mr, offset: 0 }, this.id.portNum);
        this.remoteQpn = wc.immData;
        this.remoteQkey = Number(this.qp.query().qkey);
      }
      done += n;
    }
  }

  close(): void {
    this.ah?.close();
    this.id.close();
    this.mr.close();
    this.cq.close();
    this.channel.close();
    this.pd.close();
  }
}

/** The C tool's check that a message fits the port's active MTU; false (and a line) if not. */
function fitsMtu(id: CmId, s: Settings): boolean {
  const mtu = id.context.queryPort(id.portNum).activeMtuBytes;
  if (s.count && s.size > mtu) {
    out(`udaddy: message_size ${s.size} is larger than active mtu ${mtu}`);
    return false;
  }
  return true;
}

async function runServer(s: Settings, channel: CmEventChannel, nodes: Node[]): Promise<number> {
  out("udaddy: starting server");
  const listener = channel.createId(s.portSpace);
  try {
    if (!bindAndListen("udaddy: ", listener, s.src, PORT, s.hints)) return -1;
    let ret = 0;
    for (let left = s.connections; left > 0; left--) {
      let id: CmId;
      try {
        id = await listener.getRequest();
      } catch (e) {
        ret = eventStatus("udaddy", e);
        continue;
      }
      let node: Node | undefined;
      try {
        if (!fitsMtu(id, s)) throw new Error("message size");
        node = new Node(id, s);
        node.postRecvs(s);
        await id.accept({ qpNum: node.qp.qpNum });
        node.connected = true;
        nodes.push(node);
      } catch {
        out("udaddy: failing connection request");
        node?.close();
        if (!id.closed) id.reject();
      }
    }
    if (s.count) {
      out("receiving data transfers");
      for (const n of nodes) await n.poll(s.count, true);
      out("sending replies");
      for (const n of nodes) n.postSends(s, true);
      for (const n of nodes) await n.poll(s.count, false);
      out("data transfers complete");
    }
    return ret;
  } finally {
    listener.close();
  }
}

/** Resolves, creates the node and connects one id; resolves with the ESTABLISHED event. */
async function connectOne(
  id: CmId,
  s: Settings,
  addr: RdmaAddr,
  nodes: Node[],
): Promise<CmEvent> {
  try {
    await id.resolveAddress(addr.destination!, {
      source: addr.source ?? undefined,
      timeoutMs: 2000,
    });
  } catch (e) {
    if (e instanceof CmEventError) throw e;
    perror("udaddy: failure getting addr", e);
    throw new Status(-1, e);
  }
  if (s.tos !== undefined) id.setTos(s.tos);
  try {
    await id.resolveRoute({ timeoutMs: 2000 });
  } catch (e) {
    if (!(e instanceof NativeError)) throw e; // a ROUTE_ERROR event is the C tool's event line
    perror("udaddy: resolve route failed", e);
    throw new Status(-1, e);
  }
  if (!fitsMtu(id, s)) throw new Status(-Errno.EINVAL);
  const node = new Node(id, s);
  nodes.push(node);
  node.postRecvs(s);
  const ev = await id.connect({});
  const ud = ev.ud!;
  node.remoteQpn = ud.qpNum;
  node.remoteQkey = ud.qkey;
  try {
    node.ah = node.pd.createAh(ud.ahAttr);
  } catch {
    out("udaddy: failure creating address handle");
    throw new Status(-1);
  }
  node.connected = true;
  return ev;
}

async function runClient(s: Settings, channel: CmEventChannel, nodes: Node[]): Promise<number> {
  out("udaddy: starting client");
  let addr: RdmaAddr;
  try {
    addr = getRdmaAddr(s.src, s.dst, PORT, s.hints);
    if (!addr.destination) throw new Error("no destination");
  } catch {
    out(`udaddy: getaddrinfo error: ${GAI_FAILURE}`);
    return -1;
  }
  out("udaddy: connecting");
  const ids = Array.from({ length: s.connections }, () => channel.createId(s.portSpace));
  let ret = 0;
  const results = await Promise.allSettled(ids.map((id) => connectOne(id, s, addr, nodes)));
  for (const r of results) if (r.status === "rejected") ret = eventStatus("udaddy", r.reason);
  for (const id of ids) if (!nodes.some((n) => n.id === id)) id.close();
  if (ret) return ret;
  if (s.count) {
    out("initiating data transfers");
    for (const n of nodes) n.postSends(s, false);
    out("receiving data transfers");
    for (const n of nodes) await n.poll(s.count, false);
    out("data transfers complete");
  }
  return ret;
}

/** `-p` (numeric), then `-P udp|ipoib`. */
function portSpaceOf(values: Values): "UDP" | "IPOIB" {
  let ps = udPortSpace(values);
  const name = values["port-space-name"];
  if (name !== undefined) {
    const t = String(name).toLowerCase();
    if (t.startsWith("ipoib")) ps = "IPOIB";
    else if (t.startsWith("udp")) ps = "UDP";
    else console.error("Warning: unknown port space format");
  }
  return ps;
}

if (import.meta.main) {
  await runTool(SPEC, async ({ values }) => {
    const s: Settings = {
      dst: stringOption(values, "server"),
      src: stringOption(values, "bind"),
      portSpace: portSpaceOf(values),
      hints: formatHints(stringOption(values, "format")),
      ...cmCounts(values),
    };
    const channel = new CmEventChannel();
    const nodes: Node[] = [];
    return await cmTest(
      () => s.dst ? runClient(s, channel, nodes) : runServer(s, channel, nodes),
      () => {
        for (const n of nodes) n.close();
        channel.close();
      },
    );
  });
}
