/** The journal cannot take or keep records: its directory, a write, or a sync to the disk failed. The message says which file and why. */
export class JournalError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'JournalError';
  }
}
