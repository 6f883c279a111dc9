/**
 * mckey — `mckey` over this library: multicast through rdma_cm. Each node resolves the
 * group address on a UDP (or IPoIB) port-space id, creates a UD QP, joins the group
 * and gets the group's QPN (0xffffff), Q_Key and address handle from the
 * MULTICAST_JOIN event. After a 3-second pause (as the C tool, for the fabric to set
 * up the group) the sender (`-s`) posts `-C` datagrams to the group; a receiver
 * counts `-C` receives. Both leave the group at the end. Either side can be the C
 * `mckey`.
 *
 * ```sh
 * deno run --allow-ffi jsr:@rdma/verbs/examples/mckey -m 239.1.2.3 -b 10.0.2.15        # receiver
 * bun examples/mckey.ts -m 239.1.2.3 -b 10.0.2.15 -s                                   # sender
 * ```
 *
 * @module
 */

import {
  AccessFlags,
  type AddressHandle,
  awaitCompletions,
  CmEventChannel,
  CmEventError,
  type CmId,
  type CompletionChannel,
  type CompletionQueue,
  Errno,
  type MemoryRegion,
  parseGid,
  PortSpace,
  type ProtectionDomain,
  QpType,
  type QueuePair,
  SendFlags,
  WcStatus,
  WrOpcode,
} from "../mod.ts";
import { gidToInet6 } from "./_common/gid.ts";
import { intOption, out, runTool, stringOption, type ToolSpec, UsageError } from "./_common/cli.ts";

/** Bytes of a UD receive that hold the global route header. */
const GRH = 40;
/** The C tool's pause after joining, for the fabric to set up the group. */
const JOIN_PAUSE_MS = 3000;

const SPEC: ToolSpec = {
  name: "mckey",
  synopsis: [
    "-m multicast_address [-b bind_address] [-c connections] [-C message_count] [-S message_size]",
    "-m multicast_address -s [-b bind_address] [-c connections] [-C message_count] [-S message_size]",
  ],
  options: {
    multicast: { short: "m", type: "string", arg: "multicast_address", help: "the group" },
    unmapped: {
      short: "M",
      type: "string",
      arg: "unmapped_multicast_address",
      help: "an AF_IB group (not supported by this port)",
    },
    sender: { short: "s", type: "boolean", help: "send to the group (default: receive)" },
    bind: { short: "b", type: "string", arg: "bind_address", help: "local address to bind to" },
    connections: { short: "c", type: "string", arg: "connections", help: "default 1" },
    count: { short: "C", type: "string", arg: "message_count", help: "default 10" },
    size: { short: "S", type: "string", arg: "message_size", help: "default 100" },
    "port-space": {
      short: "p",
      type: "string",
      arg: "port_space",
      help: "0x111 for UDP (default), 0x2 for IPOIB",
    },
    "send-only": {
      short: "o",
      type: "boolean",
      help: "join as a send-only full-member (not supported by this port)",
    },
    "no-loopback": {
      short: "l",
      type: "boolean",
      help: "join without multicast loopback (not supported by this port)",
    },
  },
  maxPositionals: 0,
  permissions: "--allow-ffi (libibverbs, librdmacm)",
};

interface Settings {
  group: string;
  src?: string;
  sender: boolean;
  portSpace: "UDP" | "IPOIB";
  connections: number;
  count: number;
  size: number;
}

/** A failure the C tool reports as a return status (after printing its own line). */
class Status extends Error {
  constructor(readonly status: number) {
    super(`status ${status}`);
  }
}

/** One member of the group: the id and its verbs objects, the group's UD address once joined. */
class Node {
  readonly id: CmId;
  pd: ProtectionDomain | null = null;
  channel: CompletionChannel | null = null;
  cq: CompletionQueue | null = null;
  qp: QueuePair | null = null;
  mr: MemoryRegion | null = null;
  ah: AddressHandle | null = null;
  remoteQpn = 0;
  remoteQkey = 0;
  connected = false;
  joined = false;

  constructor(id: CmId) {
    this.id = id;
  }

  init(s: Settings): void {
    const ctx = this.id.context;
    this.pd = ctx.allocPd();
    this.channel = ctx.createCompChannel();
    this.cq = ctx.createCq({ cqe: s.count ? s.count * 2 : 2, channel: this.channel });
    const depth = s.count ? s.count : 1;
    this.qp = this.id.createQp(this.pd, {
      sendCq: this.cq,
      recvCq: this.cq,
      type: QpType.UD,
      cap: { maxSendWr: depth, maxRecvWr: depth, maxSendSge: 1, maxRecvSge: 1 },
    });
    this.mr = this.pd.allocBuffer(s.size + GRH, { access: AccessFlags.LOCAL_WRITE });
  }

  postRecvs(s: Settings): void {
    for (let i = 0; i < s.count; i++) {
      this.qp!.postRecv({ wrId: i, sg: [{ mr: this.mr!, offset: 0, length: s.size + GRH }] });
    }
  }

  /**
   * Posts `-C` SEND_WITH_IMM datagrams (immediate: our QPN) to the group. As the C
   * tool they are unsignaled, except the last, whose completion says all have left
   * before the QP is destroyed.
   */
  async sendAll(s: Settings): Promise<void> {
    if (!this.connected || !s.count) return;
    for (let i = 0; i < s.count; i++) {
      this.qp!.postSend({
        wrId: i,
        opcode: WrOpcode.SEND_WITH_IMM,
        flags: i === s.count - 1 ? SendFlags.SIGNALED : 0,
        imm: this.qp!.qpNum,
        sg: [{ mr: this.mr!, offset: 0, length: s.size }],
        ud: { ah: this.ah!, remoteQpn: this.remoteQpn, remoteQkey: this.remoteQkey },
      });
    }
    await this.poll(1);
  }

  /** Waits for `count` successful completions. */
  async poll(count: number): Promise<void> {
    const cq = this.cq!;
    for (let done = 0; done < count;) {
      const n = await awaitCompletions(cq, { max: 8 });
      for (let i = 0; i < n; i++) {
        const wc = cq.completion(i);
        if (wc.status !== WcStatus.SUCCESS) {
          throw new Error(`completion with status ${wc.statusName} (${wc.status})`);
        }
      }
      done += n;
    }
  }

  close(): void {
    this.ah?.close();
    this.id.close();
    this.mr?.close();
    this.cq?.close();
    if (this.channel) {
      this.channel.close();
    }
    this.pd?.close();
  }
}

/** Resolves the group, sets up the node and joins; prints the C tool's "joined" line. */
async function join(node: Node, s: Settings): Promise<void> {
  const { id } = node;
  await id.resolveAddress({ address: s.group }, {
    source: s.src ? { address: s.src } : undefined,
    timeoutMs: 2000,
  });
  const mtu = id.context.queryPort(id.portNum).activeMtuBytes;
  if (s.count && s.size > mtu) {
    out(`mckey: message_size ${s.size} is larger than active mtu ${mtu}`);
    throw new Status(-Errno.EINVAL);
  }
  node.init(s);
  if (!s.sender) node.postRecvs(s);
  const ev = await id.joinMulticast({ address: s.group });
  node.joined = true;
  const a = ev.ud!.ahAttr;
  out(
    `mckey: joined dgid: ${gidToInet6(parseGid(a.grh?.dgid ?? new Uint8Array(16)))} mlid 0x${
      a.dlid.toString(16)
    } sl ${a.sl}`,
  );
  node.remoteQpn = ev.ud!.qpNum;
  node.remoteQkey = ev.ud!.qkey;
  try {
    node.ah = node.pd!.createAh(a);
  } catch {
    out("mckey: failure creating address handle");
    throw new Status(-1);
  }
  node.connected = true;
}

async function run(s: Settings, nodes: Node[]): Promise<number> {
  out(`mckey: starting ${s.sender ? "client" : "server"}`);
  out("mckey: joining");
  let ret = 0;
  const results = await Promise.allSettled(nodes.map((n) => join(n, s)));
  for (const r of results) {
    if (r.status === "fulfilled") continue;
    if (r.reason instanceof Status) ret = r.reason.status;
    else if (r.reason instanceof CmEventError) {
      out(`mckey: event: ${r.reason.eventName}, error: ${r.reason.status}`);
      ret = r.reason.status;
    } else throw r.reason;
  }
  try {
    if (ret) return ret;
    await new Promise((r) => setTimeout(r, JOIN_PAUSE_MS));
    if (s.count) {
      if (s.sender) {
        out("initiating data transfers");
        for (const n of nodes) await n.sendAll(s);
      } else {
        out("receiving data transfers");
        for (const n of nodes) if (n.connected) await n.poll(s.count);
      }
      out("data transfers complete");
    }
    return ret;
  } finally {
    for (const n of nodes) {
      if (!n.joined) continue;
      try {
        n.id.leaveMulticast({ address: s.group });
      } catch (e) {
        console.error(`mckey: failure leaving: ${(e as Error).message}`);
      }
    }
  }
}

function portSpaceOf(values: Record<string, unknown>): "UDP" | "IPOIB" {
  if (values["port-space"] === undefined) return "UDP";
  const v = intOption(values as never, "port-space", PortSpace.UDP);
  if (v === PortSpace.UDP) return "UDP";
  if (v === PortSpace.IPOIB) return "IPOIB";
  throw new UsageError(`-p: unknown port space ${String(values["port-space"])} (0x111, 0x2)`);
}

if (import.meta.main) {
  await runTool(SPEC, async ({ values }) => {
    for (const flag of ["unmapped", "send-only", "no-loopback"]) {
      if (values[flag] !== undefined && values[flag] !== false) {
        throw new UsageError(`--${flag} is not supported by this port`);
      }
    }
    const group = stringOption(values, "multicast");
    if (!group) throw new UsageError("-m multicast_address is required");
    const s: Settings = {
      group,
      src: stringOption(values, "bind"),
      sender: Boolean(values.sender),
      portSpace: portSpaceOf(values),
      connections: intOption(values, "connections", 1, 1, 1024),
      count: intOption(values, "count", 10, 0, 1 << 16),
      size: intOption(values, "size", 100, 0, 1 << 16),
    };
    if (!s.size) s.count = 0;
    const channel = new CmEventChannel();
    const nodes = Array.from(
      { length: s.connections },
      () => new Node(channel.createId(s.portSpace)),
    );
    let ret: number;
    try {
      ret = await run(s, nodes);
    } finally {
      out("test complete");
      for (const n of nodes) n.close();
      channel.close();
    }
    out(`return status ${ret}`);
    return ret;
  });
}
