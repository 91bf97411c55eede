{
  "targets": [
    {
      "target_name": "journal_files",
      "sources": ["journal_files.c"],
      "cflags": ["-O2", "-Wall", "-Wextra", "-Werror"],
      "defines": ["NAPI_VERSION=8"]
    }
  ]
}
