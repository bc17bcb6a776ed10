// Which scope rows are visible in the folding tree. A scope is shown when all
// its ancestors are expanded; a folded parent stays visible and its own row
// carries the roll-up (the backend sends stats for every level of the tree).
// A filter shows the scopes whose name holds the filter text, with their
// ancestors, unfolded, whatever the folding.

import type { ScopeEntry } from "./api";
import { escapeName } from "./names";

/** Scopes shallower than this start expanded; deeper ones start folded. */
export const DEFAULT_EXPANDED_DEPTH = 2;

/** How the tree is folded: scopes flipped away from the default, and a filter's rows (null: none). */
export interface Folding {
  toggled: ReadonlySet<string>;
  filtered: ReadonlySet<string> | null;
}

export class ScopeTree {
  private readonly parentOf = new Map<string, string | null>();
  private readonly withChildren = new Set<string>();
  private readonly depthOf = new Map<string, number>();

  constructor(readonly scopes: readonly ScopeEntry[]) {
    for (const scope of scopes) {
      this.parentOf.set(scope.name, scope.parent);
      this.depthOf.set(scope.name, scope.depth);
      if (scope.parent !== null) this.withChildren.add(scope.parent);
    }
  }

  hasChildren(scope: string): boolean {
    return this.withChildren.has(scope);
  }

  /**
   * The scopes whose name, raw or as shown (escaped), holds `query` (ignoring
   * case), and their ancestors; null for an empty query.
   */
  filter(query: string): Set<string> | null {
    const needle = query.trim().toLowerCase();
    if (needle === "") return null;
    const rows = new Set<string>();
    for (const scope of this.scopes) {
      if (!scope.name.toLowerCase().includes(needle) && !escapeName(scope.name).toLowerCase().includes(needle)) continue;
      for (let s: string | null = scope.name; s !== null && !rows.has(s); s = this.parentOf.get(s) ?? null) rows.add(s);
    }
    return rows;
  }

  /** The scope's ancestors in the tree, root first. */
  ancestors(scope: string): string[] {
    const found: string[] = [];
    for (let p = this.parentOf.get(scope) ?? null; p !== null; p = this.parentOf.get(p) ?? null) found.unshift(p);
    return found;
  }

  isExpanded(scope: string, folding: Folding): boolean {
    if (folding.filtered !== null) return true;
    const byDefault = (this.depthOf.get(scope) ?? 1) < DEFAULT_EXPANDED_DEPTH;
    return byDefault !== folding.toggled.has(scope);
  }

  /** Rows to draw, in tree order. */
  visible(folding: Folding): ScopeEntry[] {
    const filtered = folding.filtered;
    if (filtered !== null) return this.scopes.filter((scope) => filtered.has(scope.name));
    return this.scopes.filter((scope) => {
      for (let p = scope.parent; p !== null; p = this.parentOf.get(p) ?? null) {
        if (!this.isExpanded(p, folding)) return false;
      }
      return true;
    });
  }
}
