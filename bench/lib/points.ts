// The track points every benchmark sends: one source, so that bench-floor, bench-cpu and the suite
// measure the same bodies.
//
// 'repeated' is the body of every recorded run: the same coordinates in every request. 'distinct'
// gives each point random 6-decimal coordinates, as devices send them: V8 keeps a small cache of
// recently converted numbers, and a repeated body turns every coordinate into a cache hit (README,
// "Numbers, and what a repeated body hides"). 'computed' gives random doubles at full precision (16
// or 17 significant digits), as a program sends coordinates it computed: the costliest numbers to read.
export type Coordinates = 'repeated' | 'distinct' | 'computed';

export interface BenchPoint {
  container_id: string;
  lat: number;
  lon: number;
  timestamp: string;
  speed: number;
}

/** A random coordinate within ±range with 6 decimals, as a GPS receiver reports it. */
function randomCoordinate(range: number): number {
  return Math.round((Math.random() * 2 - 1) * range * 1e6) / 1e6;
}

/** A random double within ±range, every digit of it. */
function computedCoordinate(range: number): number {
  return (Math.random() * 2 - 1) * range;
}

function coordinate(coordinates: Coordinates, range: number, repeated: number): number {
  if (coordinates === 'distinct') return randomCoordinate(range);
  if (coordinates === 'computed') return computedCoordinate(range);
  return repeated;
}

/** `count` points of 64 containers named after `id`. */
export function benchPoints(count: number, id: string, coordinates: Coordinates = 'repeated'): BenchPoint[] {
  return Array.from({ length: count }, (_, i) => ({
    container_id: `${id}-c${i % 64}`,
    lat: coordinate(coordinates, 90, 51.9 + i / 1e4),
    lon: coordinate(coordinates, 180, 4.4 - i / 1e4),
    timestamp: '2024-05-01T12:00:00.123Z',
    speed: i % 30,
  }));
}
