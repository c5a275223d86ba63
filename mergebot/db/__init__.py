"""The database: where it runs (embedded or external), its schema (migrations), and its named queries."""
