// Which scope rows are visible in the folding tree. A scope is shown when all
// its ancestors are expanded; a folded parent stays visible and its own row
// carries the roll-up (the backend sends stats for every level of the tree).

import type { ScopeEntry } from "./api";

/** Scopes shallower than this start expanded; deeper ones start folded. */
export const DEFAULT_EXPANDED_DEPTH = 2;

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

  /** `toggled` holds the scopes the user flipped away from the default. */
  isExpanded(scope: string, toggled: ReadonlySet<string>): boolean {
    const byDefault = (this.depthOf.get(scope) ?? 1) < DEFAULT_EXPANDED_DEPTH;
    return byDefault !== toggled.has(scope);
  }

  /** Rows to draw, in tree order. */
  visible(toggled: ReadonlySet<string>): ScopeEntry[] {
    return this.scopes.filter((scope) => {
      for (let p = scope.parent; p !== null; p = this.parentOf.get(p) ?? null) {
        if (!this.isExpanded(p, toggled)) return false;
      }
      return true;
    });
  }
}
