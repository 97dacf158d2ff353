class Half:
    def get_plugin_name(self):
        return "missing_methods"

    def get_device(self):
        return "HALF"

    def get_runner(self):
        return {"run": "cpu"}


def get_plugin():
    return Half()
