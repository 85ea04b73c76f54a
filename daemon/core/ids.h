/*
 * ids.h - the lengths of the daemon's two identifiers, in one place.
 *
 * A file id is (st_dev, st_ino, st_size, st_mtim, st_ctim, chunk size)
 * hashed with XXH3-128 (source.c's file_id); a chunk key is the file id
 * followed by the chunk index, 8 bytes big-endian, so that a file's chunks
 * sort together in the NVMe tier's index and share its 16-byte prefix.
 */
#ifndef GR_IDS_H
#define GR_IDS_H

#define FILE_ID_LEN   16
#define CHUNK_KEY_LEN (FILE_ID_LEN + 8)

#endif
