/**
 * ucmatose - librdmacm's `ucmatose` (cmatose) over this library: RC connections through
 * rdma_cm, `-c` of them at once. The server accepts them, sends `-C` messages of `-S` bytes on
 * each and receives as many back; the client receives, then replies. `-m` moves every id to a
 * new event channel before disconnecting (`rdma_migrate_id`), `-t` sets the type of service and
 * `-a` the ACK timeout. The same progress lines as the C tool, so either side can be the C
 * `ucmatose`.
 *
 * ```sh
 * deno run --allow-ffi jsr:@rdma/verbs/examples/ucmatose -b 10.0.2.15            # server
 * bun examples/ucmatose.ts -s 10.0.2.15 -c 2 -C 10                                # client
 * ```
 *
 * @module
 */

import { type AddrInfoHints, CmEventChannel, CmEventError, type CmId, PortSpace } from "../cm.ts";
import { intOption, out, runTool, stringOption, type ToolSpec } from "./_common/cli.ts";
import * as cm from "./_common/cm.ts";

const SPEC: ToolSpec = {
  name: "ucmatose",
  synopsis: [
    "[-b bind_address] [-c connections] [-C message_count] [-S message_size] [-p port_number] [-m] [-a ack_timeout]   (server)",
    "-s server_address [-b bind_address] [-f address_format] [-P port_space] [-c connections] [-C message_count] [-S message_size] [-t tos] [-p port_number] [-m] [-a ack_timeout]",
  ],
  options: {
    ...cm.cmOptions("server", "bind", "format"),
    "port-space": { short: "P", type: "string", arg: "port_space", help: "tcp or ib" },
    ...cm.cmOptions("connections", "count", "size", "tos"),
    port: { short: "p", type: "string", arg: "port_number", help: "default 7471" },
    migrate: { short: "m", type: "boolean", help: "migrate the ids to a new event channel" },
    "ack-timeout": { short: "a", type: "string", arg: "ack_timeout", help: "QP ACK timeout" },
  },
  maxPositionals: 0,
  permissions: "--allow-ffi (libibverbs, librdmacm)",
};

interface Settings {
  dst?: string;
  src?: string;
  hints: AddrInfoHints;
  portSpace: "TCP" | "IB";
  port: number;
  connections: number;
  count: number;
  size: number;
  tos?: number;
  ackTimeout?: number;
  migrate: boolean;
}

/** One connection of the test. */
class Node extends cm.CmNode {
  connected = false;

  constructor(id: CmId, s: Settings) {
    const depth = s.count || 1;
    super(id, { cqe: depth, depth, size: s.size, sqSigAll: true });
  }

  /** Posts `-C` receives of `-S` bytes (all into the one buffer, as the C tool). */
  postRecvs(s: Settings): void {
    for (let i = 0; i < s.count; i++) this.qp.postRecv({ sg: [{ mr: this.mr!, length: s.size }] });
  }

  /** Posts `-C` sends (unsignaled; the QP signals them all). */
  postSends(s: Settings): void {
    if (!this.connected) return;
    for (let i = 0; i < s.count; i++) {
      this.qp.postSend({ flags: 0, sg: [{ mr: this.mr!, length: s.size }] });
    }
  }
}

/** The C tool's options on a new connection: ACK timeout (and TOS on the client). */
function setOptions(id: CmId, s: Settings, tos: boolean): void {
  if (tos && s.tos !== undefined) {
    try {
      id.setTos(s.tos);
    } catch (e) {
      cm.perror("cmatose: set TOS option failed", e);
    }
  }
  if (s.ackTimeout !== undefined) {
    try {
      id.setAckTimeout(s.ackTimeout);
    } catch (e) {
      cm.perror("cmatose: set ack timeout option failed", e);
    }
  }
}

/** Waits for `count` completions on every connected node's send or receive CQ. */
async function pollAll(nodes: Node[], which: "sendCq" | "recvCq", count: number): Promise<void> {
  for (const n of nodes) if (n.connected) await n.poll(n[which], count);
}

/** `-m`: moves the listener (if any) and every connection to a new event channel. */
function migrateAll(channel: CmEventChannel, nodes: Node[], listener?: CmId): {
  channel: CmEventChannel;
  listener?: CmId;
} {
  out("migrating to new event channel");
  const next = new CmEventChannel();
  const moved = listener?.migrate(next);
  for (const n of nodes) n.id = n.id.migrate(next);
  channel.close();
  return { channel: next, listener: moved };
}

/** Disconnects (or answers the peer's disconnect of) every connected node. */
async function disconnectAll(nodes: Node[], initiate: boolean): Promise<void> {
  await Promise.all(
    nodes.filter((n) => n.connected).map(async (n) => {
      if (!initiate) await n.id.waitDisconnected();
      n.connected = false;
      await n.id.disconnect();
    }),
  );
}

async function runServer(
  s: Settings,
  ch: { channel: CmEventChannel },
  nodes: Node[],
): Promise<number> {
  out("cmatose: starting server");
  let listener = ch.channel.createId(s.portSpace);
  try {
    if (!cm.bindAndListen("cmatose: ", listener, s.src, s.port, s.hints)) return -1;
    let ret = 0;
    for (let left = s.connections; left > 0 && !ret; left--) {
      let req: CmId;
      try {
        req = await listener.getRequest();
      } catch (e) {
        ret = cm.eventStatus("cmatose", e);
        break;
      }
      let node: Node;
      try {
        if (nodes.length === s.connections) throw new Error("no node left");
        node = new Node(req, s);
        setOptions(req, s, false);
        node.postRecvs(s);
      } catch {
        out("cmatose: failing connection request");
        req.reject();
        continue;
      }
      nodes.push(node);
      try {
        await req.accept();
        node.connected = true;
      } catch (e) {
        if (e instanceof CmEventError) ret = cm.eventStatus("cmatose", e);
        else {
          cm.perror("cmatose: failure accepting", e);
          out("cmatose: failing connection request");
          if (!req.closed) req.reject();
        }
      }
    }
    if (ret) return ret;
    if (s.count) {
      out("initiating data transfers");
      for (const n of nodes) n.postSends(s);
      out("completing sends");
      await pollAll(nodes, "sendCq", s.count);
      out("receiving data transfers");
      await pollAll(nodes, "recvCq", s.count);
      out("data transfers complete");
    }
    if (s.migrate) {
      const m = migrateAll(ch.channel, nodes, listener);
      ch.channel = m.channel;
      listener = m.listener!;
    }
    out("cmatose: disconnecting");
    await disconnectAll(nodes, true);
    out("disconnected");
    return 0;
  } finally {
    listener.close();
  }
}

/** Resolves, creates the node, posts receives and connects one id. */
async function connectOne(id: CmId, s: Settings, addr: cm.RdmaAddr, nodes: Node[]): Promise<void> {
  await id.resolveAddress(addr.destination!, {
    source: addr.source ?? undefined,
    timeoutMs: 2000,
  });
  setOptions(id, s, true);
  await id.resolveRoute({ timeoutMs: 2000 });
  const node = new Node(id, s);
  nodes.push(node);
  node.postRecvs(s);
  await id.connect({
    responderResources: 1,
    initiatorDepth: 1,
    retryCount: 5,
    privateData: addr.connectData,
  });
  node.connected = true;
}

async function runClient(
  s: Settings,
  ch: { channel: CmEventChannel },
  nodes: Node[],
): Promise<number> {
  out("cmatose: starting client");
  let addr: cm.RdmaAddr;
  try {
    addr = cm.getRdmaAddr(s.src, s.dst, s.port, s.hints);
    if (!addr.destination) throw new Error("no destination");
  } catch {
    out(`cmatose: getaddrinfo error: ${cm.GAI_FAILURE}`);
    return -1;
  }
  out("cmatose: connecting");
  const ids = Array.from({ length: s.connections }, () => ch.channel.createId(s.portSpace));
  let ret = 0;
  const results = await Promise.allSettled(ids.map((id) => connectOne(id, s, addr, nodes)));
  for (const r of results) if (r.status === "rejected") ret = cm.eventStatus("cmatose", r.reason);
  for (const id of ids) if (!nodes.some((n) => n.id === id)) id.close();
  if (!ret) {
    if (s.count) {
      out("receiving data transfers");
      await pollAll(nodes, "recvCq", s.count);
      out("sending replies");
      for (const n of nodes) n.postSends(s);
      out("data transfers complete");
    }
    if (s.migrate) ch.channel = migrateAll(ch.channel, nodes).channel;
  }
  await disconnectAll(nodes, false);
  return ret;
}

if (import.meta.main) {
  await runTool(SPEC, async ({ values }) => {
    let portSpace: "TCP" | "IB" = "TCP";
    const ps = stringOption(values, "port-space");
    if (ps !== undefined) {
      if (ps.toLowerCase().startsWith("ib")) portSpace = "IB";
      else if (!ps.toLowerCase().startsWith("tcp")) {
        console.error("Warning: unknown port space format");
      }
    }
    const s: Settings = {
      dst: stringOption(values, "server"),
      src: stringOption(values, "bind"),
      hints: { ...cm.formatHints(stringOption(values, "format")), portSpace: PortSpace[portSpace] },
      portSpace,
      port: intOption(values, "port", 7471, 0, 65535),
      ...cm.cmCounts(values),
      ackTimeout: values["ack-timeout"] === undefined
        ? undefined
        : intOption(values, "ack-timeout", 0, 0, 31),
      migrate: values.migrate === true,
    };
    const ch = { channel: new CmEventChannel() };
    const nodes: Node[] = [];
    return await cm.cmTest(
      () => s.dst ? runClient(s, ch, nodes) : runServer(s, ch, nodes),
      () => {
        for (const n of nodes) n.close();
        ch.channel.close();
      },
    );
  });
}
