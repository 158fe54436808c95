-- The oldest delivery waiting for a retry, for its gauge, without a scan. Only rows that failed
-- at least once are in it, so first attempts pay nothing.
CREATE INDEX deliveries_retrying ON deliveries (first_seen)
    WHERE state = 'scheduled' AND attempts > 0;
