CREATE TABLE capacity_meters (
    owner              TEXT PRIMARY KEY,
    measured_at        BIGINT NOT NULL,
    new_attempts       BIGINT NOT NULL,
    retry_attempts     BIGINT NOT NULL,
    failed_attempts    BIGINT NOT NULL,
    busy_slot_samples  BIGINT NOT NULL,
    slot_samples       BIGINT NOT NULL
);
