"""The web console's static files (served by the broker's HTTP listener at `/`)."""
