package evidence

// HeaderDLQRefused is set on a dead letter that is stored in the catalog
// only, because the broker refused its dead-letter copy (the dead-letter
// queue was full, or the copy was larger than the broker takes): its value
// says what the broker refused and when. Such an entry has no broker copy;
// it is redriven or discarded from the catalog like any other. A name of
// the wire contract (docs/design.md §7.1).
const HeaderDLQRefused = "x-lily-dlq-refused"

// DLKeyRefusedPrefix starts the dead-lettering key (the catalog's dl_key)
// of an entry stored because the broker refused its copy, so that the
// catalog can count those entries (/healthz) and a redelivered original
// refused again is stored once.
const DLKeyRefusedPrefix = "dlq-refused:"
