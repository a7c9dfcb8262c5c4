package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/file"
	"github.com/appwrite/sdk-for-go/id"
	"github.com/appwrite/sdk-for-go/permission"
	"github.com/appwrite/sdk-for-go/role"

	"privateassistant/schema"
)

// checkAttachments refuses, before anything is uploaded, files the uploads bucket or
// admission would refuse: the limits of schema/uploads.go, which the web checks too.
func checkAttachments(paths []string) error {
	if len(paths) > schema.MaxAttachments {
		return fail(exitUsage, "send: a message carries at most %d files, not %d", schema.MaxAttachments, len(paths))
	}
	var total int64
	for _, p := range paths {
		st, err := os.Stat(p)
		switch {
		case err != nil:
			return fail(exitUsage, "send: %s: %v", p, err)
		case !st.Mode().IsRegular():
			return fail(exitUsage, "send: %s is not a regular file", p)
		case !slices.Contains(schema.UploadExtensions, strings.TrimPrefix(strings.ToLower(filepath.Ext(p)), ".")):
			return fail(exitUsage, "send: %s: this type of file cannot be attached (text, data, code, PDF or images only: %s)", p, strings.Join(schema.UploadExtensions, ", "))
		case st.Size() == 0:
			return fail(exitUsage, "send: %s is empty", p)
		case st.Size() > schema.MaxUploadBytes:
			return fail(exitUsage, "send: %s is %d bytes; a file may be at most %d", p, st.Size(), schema.MaxUploadBytes)
		}
		total += st.Size()
	}
	if total > schema.MaxAttachmentBytes {
		return fail(exitUsage, "send: the files add up to %d bytes; one message's files may add up to %d at most", total, schema.MaxAttachmentBytes)
	}
	return nil
}

// uploadAttachments uploads each file as the web does: with the user's own JWT (the
// official Go SDK, which sends files over 5 MiB in chunks) into the uploads bucket,
// readable by the user alone. It returns the file ids the message carries.
func (c *cli) uploadAttachments(ctx context.Context, paths []string) ([]string, error) {
	tok, err := c.token(ctx)
	if err != nil {
		return nil, err
	}
	client := appwrite.NewClient(appwrite.WithEndpoint(c.endpoint), appwrite.WithProject(c.project), appwrite.WithJWT(tok))
	me, err := appwrite.NewAccount(client).Get()
	if err != nil {
		return nil, fail(exitSignedOut, "send: Appwrite did not accept the session (%v); run pa login", err)
	}
	st := appwrite.NewStorage(client)
	ids := make([]string, 0, len(paths))
	for _, p := range paths {
		f, err := st.CreateFile(schema.BucketUploads, id.Unique(), file.NewInputFile(p, filepath.Base(p)),
			st.WithCreateFilePermissions([]string{permission.Read(role.User(me.Id, ""))}))
		if err != nil {
			return nil, fail(exitError, "send: uploading %s failed: %v", p, err)
		}
		fmt.Fprintf(c.errw, "attached %s (%d bytes)\n", filepath.Base(p), f.SizeOriginal)
		ids = append(ids, f.Id)
	}
	return ids, nil
}
