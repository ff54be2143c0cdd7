package storage

// DBFileName is the bbolt file a storage keeps in its --data-dir (what `cairn snapshot restore` writes).
const DBFileName = dbFileName
