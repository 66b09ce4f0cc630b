//! What the core delivers, as Ruby values: `[[id, note], ...]`, a note
//! being an abort's reason or a hold event's Hash. Used by the delivery
//! thread (`delivery.rs`) and by `AbortSignal#abort!` and `#_watch`
//! (`signal.rs`), which deliver on the calling thread.

use magnus::{prelude::*, Error, RArray, RHash, Ruby, Value};
use mistri_locks::delivery::{Delivery, Payload};
use mistri_locks::Event;

/// `[[id, note], ...]` for Ruby: an abort's note is its reason (or nil), a
/// hold event's the event's Hash ([`event_hash`]).
pub fn notes(ruby: &Ruby, deliveries: Vec<Delivery>) -> Result<RArray, Error> {
    let out = ruby.ary_new_capa(deliveries.len());
    for (id, payload) in deliveries {
        let note: Value = match payload {
            Payload::Abort(reason) => {
                reason.map_or(ruby.qnil().as_value(), |r| ruby.str_new(&r).as_value())
            }
            Payload::Hold(event) => event_hash(ruby, &event)?.as_value(),
        };
        out.push(ruby.ary_new_from_values(&[ruby.integer_from_u64(id).as_value(), note]))?;
    }
    Ok(out)
}

/// A hold's event as Ruby sees it: `{kind: :lost, key:, fence:, reason:,
/// cause: :not_held}` (cause and reason may be nil).
pub fn event_hash(ruby: &Ruby, event: &Event) -> Result<RHash, Error> {
    let h = ruby.hash_new();
    let set = |name: &str, v: Value| h.aset(ruby.to_symbol(name), v);
    let nil = ruby.qnil().as_value();
    set("kind", ruby.to_symbol(event.kind.name()).as_value())?;
    set("key", ruby.str_new(&event.key).as_value())?;
    set("fence", ruby.integer_from_u64(event.fence).as_value())?;
    set(
        "reason",
        event
            .reason
            .as_deref()
            .map_or(nil, |r| ruby.str_new(r).as_value()),
    )?;
    set(
        "cause",
        event
            .cause
            .map_or(nil, |c| ruby.to_symbol(c.name()).as_value()),
    )?;
    Ok(h)
}
