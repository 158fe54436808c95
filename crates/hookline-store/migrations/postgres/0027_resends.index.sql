CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS deliveries_event_subscriber
    ON deliveries (event_id, subscriber_id, (coalesce(resend, 0)));
