"""Services built on sgcs's public API only: queues, handles, flows, mailboxes."""
