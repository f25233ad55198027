"""Tasks of shapes other than the README's regressor, each written as a team would from the README alone."""
