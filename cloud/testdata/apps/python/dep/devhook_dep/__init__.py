VALUE = "from-dep"
