// The benchmarks' settings from the environment.

/** The number in environment variable `name`, or `dflt` when it is not set. */
export const envNumber = (name: string, dflt: number): number => (process.env[name] === undefined ? dflt : Number(process.env[name]));
