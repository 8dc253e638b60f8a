"""Sample plugins for the plugin tests: each module is one plugin, good or deliberately broken."""
