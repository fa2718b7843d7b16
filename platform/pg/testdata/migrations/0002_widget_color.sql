ALTER TABLE widgets ADD COLUMN color text NOT NULL DEFAULT 'grey';
CREATE INDEX widgets_color ON widgets (color);
