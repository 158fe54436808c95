CREATE TABLE capacity_meters (
    owner              TEXT PRIMARY KEY,
    measured_at        INTEGER NOT NULL,
    new_attempts       INTEGER NOT NULL,
    retry_attempts     INTEGER NOT NULL,
    failed_attempts    INTEGER NOT NULL,
    busy_slot_samples  INTEGER NOT NULL,
    slot_samples       INTEGER NOT NULL
);
