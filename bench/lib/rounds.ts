// Benchmarks that run their cases in rounds: the order turns by one each round, so that no case
// always runs first (on a warm or cold machine), and each figure is the median of its rounds.

/** The cases in this round's order (round 1: as given). */
export function roundOrder<T>(cases: readonly T[], round: number): T[] {
  const first = (round - 1) % cases.length;
  return [...cases.slice(first), ...cases.slice(0, first)];
}

/** The middle value (the upper one of an even count). */
export function median(xs: readonly number[]): number {
  return [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
}
