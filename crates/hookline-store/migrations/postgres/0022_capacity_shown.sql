-- NULL in a meter an older binary records: it reads as nothing answered, which never lowers the
-- estimate (only a saturated window does).
ALTER TABLE capacity_meters ADD COLUMN answered_attempts BIGINT;
ALTER TABLE capacity_meters ADD COLUMN held_slot_samples BIGINT;
CREATE TABLE capacity_shown (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    per_s        DOUBLE PRECISION NOT NULL,
    evidence     TEXT NOT NULL,
    measured_at  BIGINT NOT NULL
);
