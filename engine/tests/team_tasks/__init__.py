"""Tasks of shapes other than the guide's regressor, each written as a team would from the guide alone."""
