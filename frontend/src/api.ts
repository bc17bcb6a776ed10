// Typed access to the plugin's JSON routes (docs/HTTP_API.md). The iframe's
// <base> is /data/plugin/gradscope/, so every route is fetched relatively.
// This is the only module that talks to the backend.

/** A number as the backend sends it: NaN/Inf arrive as strings, missing as null. */
export type WireNumber = number | "NaN" | "Infinity" | "-Infinity" | null;

export interface RunSummary {
  run: string;
  losses: string[];
  kinds: string[];
  warnings: string[];
}

export interface LossEntry {
  name: string;
  kind: "loss" | "start_point";
}

export interface ScopeEntry {
  name: string;
  parent: string | null;
  depth: number;
  leaf: boolean;
}

export interface RunInfo {
  run: string;
  losses: LossEntry[];
  scopes: ScopeEntry[];
  steps: number[];
  pairs: string[];
  conflicts: [string, string][];
  has_flowgraph: boolean;
  event_count: number;
  warnings: string[];
}

export interface CellStats {
  state: string;
  static_state: string | null;
  grad_vars: number;
  l2: number | null;
  max_abs: number | null;
  nonfinite: number | null;
  zero_frac: number | null;
  violation: boolean;
  /** A blocked cell's cuts, in `tb-gradscope report`'s words (blocked cells only). */
  blocked_by?: BlockedText[];
}

/** A blocked edge as `tb-gradscope report` prints it: its line and what to do about it. */
export interface BlockedText {
  line: string;
  fix: string;
}

export interface UpdateStats {
  update_norm: number | null;
  weight_norm: number | null;
  ratio: number | null;
  /** false when the update was not measured at the step; null without update stats. */
  measured: boolean | null;
}

export interface Matrix {
  run: string;
  step: number;
  losses: string[];
  scopes: string[];
  cells: Record<string, Record<string, CellStats>>;
  updates: Record<string, UpdateStats>;
}

export interface SourceLine {
  file: string;
  line: number;
  function: string;
}

export interface BlockedEdge {
  loss: string;
  producer: string;
  consumer: string;
  op_name: string;
  op_type: string;
  cause: string;
  producer_scope: string;
  consumer_scope: string;
  source: SourceLine | null;
  /** `tb-gradscope report`'s line for the edge, and its fix. */
  line: string;
  fix: string;
}

export type GraphNodeKind = "scope" | "input" | "loss";

export interface GraphNode {
  id: string;
  kind: GraphNodeKind;
  label: string;
}

export interface GraphEdge {
  src: string;
  dst: string;
  tensors: number;
  blocked_for: string[];
}

export interface FlowGraph {
  losses: { name: string; kind: string; tensor: string }[];
  scopes: string[];
  cells: Record<string, Record<string, string>>;
  blocked_edges: BlockedEdge[];
  nodes: GraphNode[];
  edges: GraphEdge[];
  applied: string[] | null;
  warnings: string[];
  source: string;
}

export interface FlowGraphAnswer {
  run: string;
  step: number | null;
  flowgraph: FlowGraph | null;
}

/** One (step, wall_time, value) point of a series route answer. */
export type SeriesPoint = [number, number, number | null];

export interface SeriesAnswer {
  run: string;
  kind: string;
  name: string;
  scope: string;
  stat: string;
  points: SeriesPoint[];
}

export interface DriftPair {
  name: string;
  attrs: Record<string, unknown>;
  scopes: string[];
  steps: number[];
  /** values[column][scope][i] is the value at steps[i]. */
  values: Record<string, Record<string, (number | null)[]>>;
}

export interface ConflictPair {
  name: string;
  losses: string[];
  scopes: string[];
  steps: number[];
  cosine: Record<string, (number | null)[]>;
}

export interface GradEvent {
  type: string;
  name: string;
  step: number;
  message: string;
  loss: string;
  scope: string;
  pair: string;
  wall_time: number;
}

/** What `tb-gradscope doctor` finds in a run (the findings route). */
export interface Finding {
  kind: string;
  what: string;
  loss: string;
  scope: string;
  pair: string;
  /** The scope-graph edge the gradient takes into the loss ("critic/l2 -> loss:actor"), or "". */
  edge: string;
  /** Non-finite numbers arrive as null (as doctor prints them in JSON). */
  evidence: Record<string, unknown>;
  why: string;
  fix: string;
  /** The rule that pins the fix in CI, ready to paste; "" when no rule kind expresses it. */
  rule: string;
  /** -1, -1 and 0 for a finding seen only in the FlowGraph. */
  first_step: number;
  last_step: number;
  steps: number;
  /** "leak" (something trains what it must not), "hazard" (a note) or
   * "question" (a note only names can answer). */
  severity: "leak" | "hazard" | "question";
  /** The run has no FlowGraph: the finding rests on gradient tables alone. */
  partial: boolean;
  /** When it was seen and its evidence, worded as doctor prints it. */
  evidence_text: string;
}

/** One violation as `tb-gradscope check --format json` prints it (the violations route). */
export interface Violation {
  type: string;
  /** The rule broken. */
  name: string;
  /** The first step it was seen at. */
  step: number;
  message: string;
  loss: string;
  scope: string;
  pair: string;
  /** Non-finite numbers arrive as null; `at` is "trace" for one found in a FlowGraph. */
  evidence: Record<string, unknown>;
  steps_seen: number;
  last_step: number;
  source: "recorded" | "evaluated";
  /** "at trace", "at step 5", "at trace, and at 40 steps (0-195)": as check prints it. */
  when: string;
  at_trace: boolean;
  /** Rules broken in the same words, folded under this one. */
  also_breaks: string[];
  /** The evidence as the read side words it (check prints them joined by "; "). */
  evidence_text: string[];
}

export interface ViolationsAnswer {
  run: string;
  /** The rules checked: those the run recorded (check's --rules file is not the tab's). */
  rules: string[];
  violations: Violation[];
  /** What could not be checked, and how to make it checkable (check's own sentences). */
  warnings: string[];
}

/** An HTTP error with the backend's plain-text message. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Reads a wire number; NaN/Inf become JS numbers, anything else null. */
export function wireNumber(value: unknown): number | null {
  if (typeof value === "number") return value;
  if (value === "NaN") return Number.NaN;
  if (value === "Infinity") return Number.POSITIVE_INFINITY;
  if (value === "-Infinity") return Number.NEGATIVE_INFINITY;
  return null;
}

async function getJson(route: string, params: Record<string, string>): Promise<unknown> {
  const query = new URLSearchParams(params).toString();
  const response = await fetch(query ? `./${route}?${query}` : `./${route}`, {
    headers: { Accept: "application/json" },
  });
  if (!response.ok) {
    const text = (await response.text()).slice(0, 500);
    throw new ApiError(response.status, `${route}: ${response.status} ${text}`);
  }
  return response.json();
}

export async function fetchRuns(): Promise<RunSummary[]> {
  const body = (await getJson("runs", {})) as { runs?: RunSummary[] };
  return Array.isArray(body.runs) ? body.runs : [];
}

export async function fetchRunInfo(run: string): Promise<RunInfo> {
  return (await getJson("run", { run })) as RunInfo;
}

export async function fetchMatrix(run: string, step: number | null): Promise<Matrix> {
  const params: Record<string, string> = { run };
  if (step !== null) params["step"] = String(step);
  const raw = (await getJson("matrix", params)) as Matrix;
  return decodeMatrix(raw);
}

/** Turns the wire numbers of a matrix into JS numbers (NaN/Inf included). */
function decodeMatrix(raw: Matrix): Matrix {
  const cells: Matrix["cells"] = {};
  for (const [loss, row] of Object.entries(raw.cells ?? {})) {
    const decoded: Record<string, CellStats> = {};
    for (const [scope, cell] of Object.entries(row)) {
      decoded[scope] = {
        state: String(cell.state),
        static_state: cell.static_state ?? null,
        grad_vars: wireNumber(cell.grad_vars) ?? 0,
        l2: wireNumber(cell.l2),
        max_abs: wireNumber(cell.max_abs),
        nonfinite: wireNumber(cell.nonfinite),
        zero_frac: wireNumber(cell.zero_frac),
        violation: cell.violation === true,
      };
      if (Array.isArray(cell.blocked_by)) {
        decoded[scope]!.blocked_by = cell.blocked_by.map((b) => ({ line: String(b.line), fix: String(b.fix) }));
      }
    }
    cells[loss] = decoded;
  }
  const updates: Matrix["updates"] = {};
  for (const [scope, u] of Object.entries(raw.updates ?? {})) {
    updates[scope] = {
      update_norm: wireNumber(u.update_norm),
      weight_norm: wireNumber(u.weight_norm),
      ratio: wireNumber(u.ratio),
      measured: typeof u.measured === "boolean" ? u.measured : null,
    };
  }
  return { ...raw, cells, updates };
}

export async function fetchFlowGraph(run: string): Promise<FlowGraphAnswer> {
  return (await getJson("flowgraph", { run })) as FlowGraphAnswer;
}

export async function fetchSeries(run: string, kind: string, name: string, scope: string, stat: string): Promise<SeriesAnswer> {
  const raw = (await getJson("series", { run, kind, name, scope, stat })) as SeriesAnswer;
  const points = (raw.points ?? []).map(([step, wall, value]): SeriesPoint => [step, wall, wireNumber(value)]);
  return { ...raw, points };
}

export async function fetchDrift(run: string): Promise<DriftPair[]> {
  const raw = (await getJson("drift", { run })) as { pairs?: DriftPair[] };
  return (raw.pairs ?? []).map((pair) => ({ ...pair, values: decodeColumns(pair.values ?? {}) }));
}

export async function fetchConflict(run: string): Promise<ConflictPair[]> {
  const raw = (await getJson("conflict", { run })) as { pairs?: ConflictPair[] };
  return (raw.pairs ?? []).map((pair) => ({ ...pair, cosine: decodeArrays(pair.cosine ?? {}) }));
}

export async function fetchEvents(run: string): Promise<GradEvent[]> {
  const raw = (await getJson("events", { run })) as { events?: GradEvent[] };
  return Array.isArray(raw.events) ? raw.events : [];
}

export async function fetchFindings(run: string): Promise<Finding[]> {
  const raw = (await getJson("findings", { run })) as { findings?: Finding[] };
  return Array.isArray(raw.findings) ? raw.findings : [];
}

export async function fetchViolations(run: string): Promise<ViolationsAnswer> {
  const raw = (await getJson("violations", { run })) as Partial<ViolationsAnswer>;
  return {
    run,
    rules: Array.isArray(raw.rules) ? raw.rules : [],
    violations: Array.isArray(raw.violations) ? raw.violations : [],
    warnings: Array.isArray(raw.warnings) ? raw.warnings : [],
  };
}

export type ExportFormat = "csv" | "json";

/** The relative URL of a route's answer in `format`, for a download link. */
export function exportUrl(route: string, params: Record<string, string>, format: ExportFormat): string {
  return `./${route}?${new URLSearchParams({ ...params, format }).toString()}`;
}

function decodeArrays(arrays: Record<string, unknown[]>): Record<string, (number | null)[]> {
  const decoded: Record<string, (number | null)[]> = {};
  for (const [key, values] of Object.entries(arrays)) decoded[key] = values.map(wireNumber);
  return decoded;
}

function decodeColumns(columns: Record<string, Record<string, unknown[]>>): Record<string, Record<string, (number | null)[]>> {
  const decoded: Record<string, Record<string, (number | null)[]>> = {};
  for (const [column, perScope] of Object.entries(columns)) decoded[column] = decodeArrays(perScope);
  return decoded;
}
