/**
 * SeqSet remembers the last `size` seqs added, in insertion order, to tell
 * a redelivered message from a new one. Older seqs are forgotten: a message
 * redelivered after `size` newer ones is handed to the application again.
 */
export class SeqSet {
  private readonly set = new Set<bigint>();
  private readonly ring: bigint[] = [];
  private next = 0;

  constructor(private readonly size: number) {
    if (!Number.isInteger(size) || size < 1) throw new RangeError("gomsg: dedupSize must be a positive integer");
  }

  has(seq: bigint): boolean {
    return this.set.has(seq);
  }

  add(seq: bigint): void {
    if (this.set.has(seq)) return;
    if (this.ring.length < this.size) {
      this.ring.push(seq);
    } else {
      this.set.delete(this.ring[this.next]);
      this.ring[this.next] = seq;
      this.next = (this.next + 1) % this.size;
    }
    this.set.add(seq);
  }

  get length(): number {
    return this.set.size;
  }
}
