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
}

export interface UpdateStats {
  update_norm: number | null;
  weight_norm: number | null;
  ratio: number | null;
}

export interface Matrix {
  run: string;
  step: number;
  losses: string[];
  scopes: string[];
  cells: Record<string, Record<string, CellStats>>;
  updates: Record<string, UpdateStats>;
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
    }
    cells[loss] = decoded;
  }
  const updates: Matrix["updates"] = {};
  for (const [scope, u] of Object.entries(raw.updates ?? {})) {
    updates[scope] = {
      update_norm: wireNumber(u.update_norm),
      weight_norm: wireNumber(u.weight_norm),
      ratio: wireNumber(u.ratio),
    };
  }
  return { ...raw, cells, updates };
}
