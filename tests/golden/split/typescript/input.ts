// event-store.ts - an append-only event store with typed projections.
import { createHash } from "crypto";

export type EventKind = "created" | "renamed" | "deleted";

export interface StoredEvent<T = unknown> {
  id: string;
  stream: string;
  kind: EventKind;
  payload: T;
  at: Date;
}

export interface Projection<S> {
  initial(): S;
  apply(state: S, event: StoredEvent): S;
}

const hashOf = (value: unknown): string =>
  createHash("sha256").update(JSON.stringify(value)).digest("hex");

export class EventStore {
  private readonly events: StoredEvent[] = [];
  private readonly byStream = new Map<string, StoredEvent[]>();

  append<T>(stream: string, kind: EventKind, payload: T): StoredEvent<T> {
    const event: StoredEvent<T> = {
      id: hashOf({ stream, kind, payload, n: this.events.length }),
      stream,
      kind,
      payload,
      at: new Date(),
    };
    this.events.push(event);
    const list = this.byStream.get(stream) ?? [];
    list.push(event);
    this.byStream.set(stream, list);
    return event;
  }

  read(stream: string): readonly StoredEvent[] {
    return this.byStream.get(stream) ?? [];
  }

  project<S>(stream: string, projection: Projection<S>): S {
    return this.read(stream).reduce(
      (state, event) => projection.apply(state, event),
      projection.initial(),
    );
  }
}

export const nameProjection: Projection<string | null> = {
  initial: () => null,
  apply: (state, event) => {
    if (event.kind === "deleted") {
      return null;
    }
    const payload = event.payload as { name?: string };
    return payload.name ?? state;
  },
};

export enum Retention {
  Forever = "forever",
  ThirtyDays = "30d",
}
