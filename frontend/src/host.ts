// Talks to the TensorBoard page that hosts this iframe. TensorBoard's guest
// library is not shipped in the pip package, so this is our own small guest:
// post "experimental.bootstrap" with a MessageChannel port to the parent, then
// exchange JSON strings {type, id, payload, error, isReply} over the port.
// Outside TensorBoard, or when the host stays silent, the tab's own status
// poll (live.ts) is all there is; inside, TensorBoard's messages make it ask now.

const BOOTSTRAP = "experimental.bootstrap";
const GET_RUNS = "experimental.GetRuns";
const DATA_RELOADED = "experimental.DataReloaded";
const RUNS_CHANGED = "experimental.RunsChanged";

/** How long to wait for the host's first answer before polling. */
const HOST_TIMEOUT_MS = 5_000;

interface Message {
  type: string;
  id: number;
  payload: unknown;
  error: string | null;
  isReply: boolean;
}

export type HostMode = "tensorboard" | "polling";

export interface HostCallbacks {
  /** TensorBoard reloaded its data. */
  onReload: () => void;
  /** The set of runs may have changed. */
  onRunsChanged: () => void;
  /** Called once we know whether TensorBoard answers. */
  onMode: (mode: HostMode) => void;
}

/** Connects to TensorBoard if embedded; "polling" when there is no host to hear from. Returns a disconnect function. */
export function connectHost(callbacks: HostCallbacks): () => void {
  const startPolling = (): void => callbacks.onMode("polling");
  if (window.parent === window) {
    startPolling();
    return () => undefined;
  }

  const channel = new MessageChannel();
  const port = channel.port1;
  let heard = false;
  const heardFromHost = (): void => {
    if (heard) return;
    heard = true;
    window.clearTimeout(timeout);
    callbacks.onMode("tensorboard");
  };
  const timeout = window.setTimeout(() => {
    if (!heard) startPolling();
  }, HOST_TIMEOUT_MS);

  port.addEventListener("message", (event: MessageEvent) => {
    const message = parseMessage(event.data);
    if (message === null) return;
    heardFromHost();
    if (message.isReply) return;
    if (message.type === DATA_RELOADED) callbacks.onReload();
    if (message.type === RUNS_CHANGED) callbacks.onRunsChanged();
    // The host awaits a reply to every message it sends.
    port.postMessage(JSON.stringify({ ...message, payload: null, error: null, isReply: true }));
  });
  port.start();
  window.parent.postMessage(BOOTSTRAP, "*", [channel.port2]);
  // Any reply proves the host is listening; GetRuns is the cheapest question.
  const ask: Message = { type: GET_RUNS, id: 0, payload: null, error: null, isReply: false };
  port.postMessage(JSON.stringify(ask));

  return () => {
    window.clearTimeout(timeout);
    port.close();
  };
}

function parseMessage(data: unknown): Message | null {
  if (typeof data !== "string") return null;
  try {
    const parsed: unknown = JSON.parse(data);
    if (typeof parsed !== "object" || parsed === null) return null;
    const m = parsed as Partial<Message>;
    if (typeof m.type !== "string" || typeof m.id !== "number") return null;
    return {
      type: m.type,
      id: m.id,
      payload: m.payload ?? null,
      error: m.error ?? null,
      isReply: m.isReply === true,
    };
  } catch {
    return null;
  }
}
