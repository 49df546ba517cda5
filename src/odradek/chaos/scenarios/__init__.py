"""The runs of `odradek chaos`, each put together from the kit's library (odradek.chaos): a
scenario never imports another scenario."""
