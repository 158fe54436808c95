ALTER TABLE deliveries ADD COLUMN waiting_on TEXT;
