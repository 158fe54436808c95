ALTER TABLE deliveries ADD COLUMN waiting_on TEXT;
CREATE INDEX deliveries_window ON deliveries (window_start)
    WHERE state = 'scheduled';
