"""Layout selection and cost-model ranking of confirmed μGraphs (issue 6)."""
