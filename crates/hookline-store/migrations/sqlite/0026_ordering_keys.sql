-- Ordering keys: an event may name what its deliveries are ordered by (a shipment's id). Each
-- delivery keeps its event's key, so that a publish and an ending find the deliveries of the
-- same subscriber and key still on their way through an index of those alone: rows without a
-- key (every row an older binary writes) are not in it, and a key's row leaves it when it ends.
ALTER TABLE events ADD COLUMN ordering_key TEXT;
ALTER TABLE deliveries ADD COLUMN ordering_key TEXT;
CREATE INDEX deliveries_ordering ON deliveries (subscriber_id, ordering_key, seq)
    WHERE ordering_key IS NOT NULL AND state IN ('scheduled', 'in_flight');
