"""Built-in plugins: registered by :func:`rensei_routing.plugins.manager.get_plugin_manager` like
any installed plugin."""
