-- Unqualified names: Migrate puts the target schema first in search_path.
CREATE TABLE widgets (
    id   bigint PRIMARY KEY,
    name text NOT NULL
);
