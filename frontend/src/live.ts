// Keeps the tab live whatever TensorBoard's "Reload data" setting: while the
// tab is visible it asks the status route (each run's latest step and data
// version) every POLL_INTERVAL_MS with the last ETag, so an unchanged answer
// is a bodiless 304, and hands a changed one to the app, which fetches only
// what changed. Hidden (another TensorBoard tab or browser tab), it stops.
//
// The plugin reads through TensorBoard's data provider, which loads new
// records from disk every --reload_interval seconds (5 by default): a record
// reaches the tab at most reload_interval + ~1 s (the plugin's listing cache)
// + POLL_INTERVAL_MS after it is written.

/** How often the status route is asked while the tab is visible. */
export const POLL_INTERVAL_MS = 2_000;

export interface RunStatus {
  run: string;
  last_step: number | null;
  /** Changes whenever TensorBoard has loaded anything newer for the run. */
  version: string;
}

export interface Status {
  runs: RunStatus[];
  /** TensorBoard's --reload_interval in seconds (0: the logdir is read once), or null when unknown. */
  reload_interval: number | null;
}

/** Whether the tab can be seen: its page is not hidden and its iframe is displayed. */
export function tabVisible(): boolean {
  return document.visibilityState !== "hidden" && window.innerWidth > 0 && window.innerHeight > 0;
}

export class LivePoller {
  private etag: string | null = null;
  private timer: number | undefined;
  private busy = false;
  /** Polls answered (200 or 304), for tests and the status line. */
  polls = 0;

  constructor(private readonly onStatus: (status: Status) => void, private readonly onError: (error: unknown) => void) {}

  start(): void {
    document.addEventListener("visibilitychange", () => this.schedule(0));
    window.addEventListener("resize", () => this.schedule(0));
    this.schedule(0);
  }

  /** Asks now (TensorBoard said it reloaded, or the user pressed Refresh). */
  pollNow(): void {
    this.schedule(0);
  }

  /** Forgets the last answer, so the next one counts as changed. */
  reset(): void {
    this.etag = null;
  }

  private schedule(delay: number): void {
    window.clearTimeout(this.timer);
    this.timer = window.setTimeout(() => void this.poll(), delay);
  }

  private async poll(): Promise<void> {
    if (!tabVisible()) return; // visibilitychange / resize start it again
    if (this.busy) return;
    this.busy = true;
    try {
      const headers: Record<string, string> = { Accept: "application/json" };
      if (this.etag !== null) headers["If-None-Match"] = this.etag;
      const response = await fetch("./status", { headers, cache: "no-store" });
      this.polls += 1;
      document.getElementById("gradscope")?.setAttribute("data-polls", String(this.polls));
      if (response.status === 200) {
        const status = (await response.json()) as Status;
        this.etag = response.headers.get("ETag");
        this.onStatus(status);
      } else if (response.status !== 304) {
        throw new Error(`status: ${response.status} ${(await response.text()).slice(0, 200)}`);
      }
    } catch (e) {
      this.onError(e);
    } finally {
      this.busy = false;
      this.schedule(POLL_INTERVAL_MS);
    }
  }
}
