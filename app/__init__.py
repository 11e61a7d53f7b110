"""The application layer: joins the control plane's state to a dataplane backend."""
