"""Every setting of orchestrator.toml, declared once (kind, default, help, environment
variable, flag; the optimization settings and the `[flavors.<name>]` keys among them), the
kinds of value a setting holds, and what is derived from the declarations: the CLI flags
and the settings table of the configuration reference."""
