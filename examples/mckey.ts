/**
 * mckey - `mckey` over this library: multicast through rdma_cm. Each node resolves the
 * group address on a UDP (or IPoIB) port-space id (or, with `-M`, binds and joins an AF_IB
 * group directly), creates a UD QP, joins the group (`rdma_join_multicast_ex`: `-o` joins as a
 * send-only full member) and gets the group's QPN (0xffffff), Q_Key and address handle from
 * the MULTICAST_JOIN event. `-l` creates the QP with `BLOCK_SELF_MCAST_LB` (no loopback of its
 * own datagrams); that QP is not the id's, so it follows the id through `initQpAttr` and is
 * attached to the group by hand, as librdmacm would. After a 3-second pause (as the C tool, for
 * the fabric to set up the group) the sender (`-s`) posts `-C` datagrams to the group; a
 * receiver counts `-C` receives. Both leave the group at the end. Either side can be the C
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
  type AddressInput,
  CmEventChannel,
  type CmId,
  type CompletionQueue,
  Errno,
  McJoinFlag,
  type MemoryRegion,
  NativeError,
  parseGid,
  type ProtectionDomain,
  QpCreateFlags,
  QpState,
  QpType,
  type QueuePair,
  SendFlags,
  WrOpcode,
} from "../cm.ts";
import { gidToInet6 } from "./_common/gid.ts";
import { out, runTool, stringOption, type ToolSpec, UsageError } from "./_common/cli.ts";
import {
  cmCounts,
  cmOptions,
  cmTest,
  errnoAfterPerror,
  eventStatus,
  perror,
  pollOk,
  Status,
  udPortSpace,
} from "./_common/cm.ts";

/** Bytes of a UD receive that hold the global route header. */
const GRH = 40;
/** The C tool's pause after joining, for the fabric to set up the group. */
const JOIN_PAUSE_MS = 3000;

const SPEC: ToolSpec = {
  name: "mckey",
  synopsis: [
    "-m multicast_address [-b bind_address] [-c connections] [-C message_count] [-S message_size]",
    "-m multicast_address -s [-o] [-l] [-b bind_address] [-c connections] [-C message_count] [-S message_size]",
    "-M unmapped_multicast_address -b bind_address [-s] ...",
  ],
  options: {
    multicast: { short: "m", type: "string", arg: "multicast_address", help: "the group" },
    unmapped: {
      short: "M",
      type: "string",
      arg: "unmapped_multicast_address",
      help: "an AF_IB group (a GID); replaces -m and requires -b",
    },
    sender: { short: "s", type: "boolean", help: "send to the group (default: receive)" },
    ...cmOptions("bind", "connections", "count", "size", "ud-port-space"),
    "send-only": { short: "o", type: "boolean", help: "join as a send-only full-member" },
    "no-loopback": { short: "l", type: "boolean", help: "join without multicast loopback" },
  },
  maxPositionals: 0,
  permissions: "--allow-ffi (libibverbs, librdmacm)",
};

interface Settings {
  /** The group: an IP address, or with `-M` a GID (AF_IB). */
  group: AddressInput;
  unmapped: boolean;
  src?: string;
  sender: boolean;
  sendOnly: boolean;
  loopback: boolean;
  portSpace: "UDP" | "IPOIB";
  connections: number;
  count: number;
  size: number;
}

/** One member of the group: the id and its verbs objects, the group's UD address once joined. */
class Node {
  readonly id: CmId;
  pd: ProtectionDomain | null = null;
  cq: CompletionQueue | null = null;
  qp: QueuePair | null = null;
  /** `-l`: the QP is not the id's: it is attached to the group here. */
  raw = false;
  /** The group the raw QP is attached to. */
  attached: { gid: Uint8Array; lid: number } | null = null;
  mr: MemoryRegion | null = null;
  ah: AddressHandle | null = null;
  remoteQpn = 0;
  remoteQkey = 0;
  connected = false;
  joined = false;

  constructor(id: CmId) {
    this.id = id;
  }

  /** init_node: PD, CQ, QP (the id's, or with `-l` one made with BLOCK_SELF_MCAST_LB), buffer. */
  init(s: Settings): void {
    const ctx = this.id.context;
    this.pd = ctx.allocPd();
    this.cq = ctx.createCq({ cqe: s.count ? s.count * 2 : 2, channel: ctx.createCompChannel() });
    const depth = s.count ? s.count : 1;
    const init = {
      sendCq: this.cq,
      recvCq: this.cq,
      type: QpType.UD,
      cap: { maxSendWr: depth, maxRecvWr: depth, maxSendSge: 1, maxRecvSge: 1 },
    };
    try {
      if (s.loopback) this.qp = this.id.createQp(this.pd, init);
      else {
        const qp = this.pd.createQpEx({
          ...init,
          createFlags: QpCreateFlags.BLOCK_SELF_MCAST_LB,
          sendOps: [WrOpcode.SEND_WITH_IMM],
        });
        this.qp = qp;
        this.raw = true;
        // the connection manager's UD attributes (P_Key index, port, Q_Key), then RTR and RTS
        qp.modify(this.id.initQpAttr(QpState.INIT));
        qp.toRtr();
        qp.toRts({ psn: 0 });
      }
    } catch (e) {
      perror("mckey: unable to create QP", e);
      throw new Status(-1, e);
    }
    if (s.count) this.mr = this.pd.allocBuffer(s.size + GRH, { access: AccessFlags.LOCAL_WRITE });
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
  poll(count: number): Promise<void> {
    return pollOk(this.cq!, count);
  }

  close(): void {
    this.ah?.close();
    this.id.close();
    if (this.raw) this.qp?.close();
    this.mr?.close();
    const channel = this.cq?.channel;
    this.cq?.close();
    channel?.close();
    this.pd?.close();
  }
}

/**
 * addr_handler: checks the message size against the port's MTU, sets up the node, posts
 * receives (receivers) and joins; a failure is a Status after the C tool's line.
 */
async function join(node: Node, s: Settings): Promise<void> {
  const { id } = node;
  const mtu = id.context.queryPort(id.portNum).activeMtuBytes;
  if (s.count && s.size > mtu) {
    out(`mckey: message_size ${s.size} is larger than active mtu ${mtu}`);
    throw new Status(-Errno.EINVAL);
  }
  node.init(s);
  if (!s.sender) node.postRecvs(s);
  let ev;
  try {
    ev = await id.joinMulticast(s.group, {
      joinFlags: s.sendOnly ? McJoinFlag.SENDONLY_FULLMEMBER : McJoinFlag.FULLMEMBER,
    });
  } catch (e) {
    if (!(e instanceof NativeError)) throw e; // a JOIN_ERROR event is the C tool's event line
    perror("mckey: failure joining", e);
    throw new Status(-1, errnoAfterPerror(e));
  }
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
  if (node.raw && !s.sendOnly) {
    node.qp!.attachMcast(a.grh!.dgid, a.dlid);
    node.attached = { gid: a.grh!.dgid, lid: a.dlid };
  }
  node.connected = true;
}

/** A failure before any join was attempted: the C tool returns without leaving. */
class Early extends Status {}

/** Binds (`-b`), then resolves the group (or, unmapped, joins at once) for one node. */
async function start(node: Node, s: Settings): Promise<void> {
  if (s.src) {
    try {
      node.id.bind({ address: s.src });
    } catch (e) {
      perror("mckey: addr bind failure", e);
      throw new Early(-1, e);
    }
  }
  if (!s.unmapped) {
    try {
      await node.id.resolveAddress(s.group, {
        source: s.src ? { address: s.src } : undefined,
        timeoutMs: 2000,
      });
    } catch (e) {
      if (!(e instanceof NativeError)) throw e; // an ADDR_ERROR event is the C tool's event line
      perror("mckey: resolve addr failure", e);
      throw new Early(-1, e);
    }
    return await join(node, s);
  }
  try {
    await join(node, s);
  } catch (e) {
    if (!(e instanceof Status) || e.error === undefined) throw e;
    perror("mckey: resolve addr failure", e.error);
    throw new Early(e.status, e.error);
  }
}

/** Leaves the group on every node; like the C tool, the status is that of the last leave. */
function leaveAll(nodes: Node[], s: Settings): number {
  let ret = 0;
  for (const n of nodes) {
    try {
      if (n.attached) n.qp!.detachMcast(n.attached.gid, n.attached.lid);
      n.id.leaveMulticast(s.group);
      ret = 0;
    } catch (e) {
      perror("mckey: failure leaving", e);
      ret = -1;
    }
  }
  return ret;
}

async function run(s: Settings, nodes: Node[]): Promise<number> {
  out(`mckey: starting ${s.sender ? "client" : "server"}`);
  out("mckey: joining");
  let ret = 0;
  const results = await Promise.allSettled(nodes.map((n) => start(n, s)));
  for (const r of results) {
    if (r.status === "fulfilled") continue;
    if (r.reason instanceof Early) return r.reason.status;
    ret = eventStatus("mckey", r.reason);
  }
  if (!ret) {
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
  }
  return leaveAll(nodes, s);
}

if (import.meta.main) {
  await runTool(SPEC, async ({ values }) => {
    const unmapped = stringOption(values, "unmapped");
    const group = unmapped ?? stringOption(values, "multicast");
    if (!group) throw new UsageError("-m multicast_address is required");
    const src = stringOption(values, "bind");
    if (unmapped !== undefined && !src) {
      out("unmapped multicast address requires binding to source address");
      return 1;
    }
    const s: Settings = {
      group: unmapped !== undefined
        ? { family: "IB", address: unmapped, port: 0 }
        : { address: group },
      unmapped: unmapped !== undefined,
      src,
      sender: Boolean(values.sender),
      sendOnly: values["send-only"] === true,
      loopback: values["no-loopback"] !== true,
      portSpace: udPortSpace(values),
      ...cmCounts(values),
    };
    const channel = new CmEventChannel();
    const nodes = Array.from(
      { length: s.connections },
      () => new Node(channel.createId(s.portSpace)),
    );
    return await cmTest(() => run(s, nodes), () => {
      for (const n of nodes) n.close();
      channel.close();
    });
  });
}
