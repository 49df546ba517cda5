"""Machinery shared by the replica manager and the coordinators: the hierarchical timing wheel
(`timer`) and the purgatory of delayed operations (`purgatory`). Below every user of it, so the
group coordinator, the replica manager and later coordinators import it without reaching into
`server/`."""
